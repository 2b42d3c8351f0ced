"""The CPU provider: host memory, numpy kernels, always available."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping

from onnxplug.api import CompiledPartition, Device, FuseClaim, KernelClaim, KernelProvider, ProviderFactory


class CPUProvider(KernelProvider):
    """Runs every node it has a kernel for, one at a time, on numpy arrays — except two kinds of
    chains it fuses into one step: the QuantizeLinear → DequantizeLinear pairs of QDQ models, in
    one pass (``kernels._qdq``) together with the Conv, Sum or Add that produces them and a
    following Relu → Q → DQ (``kernels._qdq_chain``), and linear-model pipelines, ``[Scaler →]
    LinearClassifier [→ Normalizer]`` and ``Scaler → LinearRegressor`` (``kernels._linear_chain``)."""

    def capability(self, graph, kernels) -> list[KernelClaim | FuseClaim]:
        claims = super().capability(graph, kernels)
        op_types = {node.op_type for node in graph.nodes}
        chains: list[tuple[tuple[str, ...], str]] = []
        claimed = {claim.node for claim in claims if isinstance(claim, KernelClaim)}
        if "QuantizeLinear" in op_types:  # else the fusing code (with the convolutions) stays unloaded
            from .kernels._qdq_chain import qdq_chains

            chains += [(chain, "qdq") for chain in qdq_chains(graph, claimed)]
        if op_types & {"LinearClassifier", "LinearRegressor"}:
            from .kernels._linear_chain import linear_chains

            chains += [(chain, "linear") for chain in linear_chains(graph, claimed)]
        if not chains:
            return claims
        fused = {name for chain, _ in chains for name in chain}
        kept = [claim for claim in claims if not (isinstance(claim, KernelClaim) and claim.node in fused)]
        return kept + [FuseClaim(chain, name=kind) for chain, kind in chains]

    def compile(self, partition) -> CompiledPartition:
        from .kernels._linear_chain import compile_linear_chain, is_linear_chain

        if is_linear_chain(partition):
            return compile_linear_chain(partition)
        from .kernels._qdq import compile_qdq_pair
        from .kernels._qdq_chain import compile_qdq_chain
        from .kernels.quantization import quantize_dequantize

        if len(partition.model.graph.node) == 2:
            return compile_qdq_pair(partition, quantize_dequantize)
        return compile_qdq_chain(partition, quantize_dequantize)


class CPUProviderFactory(ProviderFactory):
    name = "cpu"
    ort_name = "CPUExecutionProvider"
    priority = 0  # the last resort: every other provider is asked first
    # onnxruntime's CPU options: use_arena (default on; ONNXPLUG_CPU_ARENA=0 turns it off too)
    # keeps freed buffers in the C heap (onnxplug_cpu.heap); arena_extend_strategy is accepted for
    # compatibility (see the README).
    option_names = frozenset({"arena_extend_strategy", "use_arena"})

    def devices(self) -> list[Device]:
        return [Device("cpu", 0, vendor=platform.machine(), name=f"{os.cpu_count() or 1} cores")]

    def create(self, device: Device, options: Mapping[str, str]) -> CPUProvider:
        self.check_options(options)
        if str(options.get("use_arena", "1")).strip().lower() not in ("0", "false"):
            from .heap import keep_freed_heap

            keep_freed_heap()
        return CPUProvider(self, device)

"""InferenceSession: onnxruntime's entry point, on the plugin core.

Creation runs the whole pipeline once — load, validate, choose providers, partition, plan — so
that ``run`` only checks feeds, executes the plan's steps and hands back fresh arrays.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from .._plugins import Environment, default_environment
from ..api import KernelLookup, Provider, ProviderContext
from ..compile_cache import CONFIG_KEY as COMPILE_CACHE_KEY
from ..compile_cache import default_compile_cache
from ..errors import InvalidArgument, NoModel
from ..graph import LoadedModel, release_tensors
from ..kernels import RunState, enter_run, leave_run
from ..optimizer import OptimizedModel, optimize, stages_for_level
from ..partition import PartitionedModel, ProviderSlot, node_opsets, partition_model
from ._blas_threads import CONFIG_KEY as ADAPTIVE_THREADS_KEY
from ._blas_threads import controller_for
from ._capture import SessionCapture
from ._device_run import run_on_devices
from ._evaluate import KernelEvaluator
from ._executors import ParallelExecutor
from ._global_threads import apply_global_threads
from ._io import FeedChecker, ModelMetadata, NodeArg, fresh_outputs, input_specs, output_args
from ._model_config import apply_model_config
from ._plan import GraphPlan, build_plan
from ._profiler import Profiler
from ._providers import create_providers, parse_providers, select_factories
from ._rule_gates import shared_gate
from ._save import write_optimized_model
from ._session_info import assignment_info, memory_infos
from ._session_log import log_creation, session_logger
from ._source import ModelSource
from .iobinding import IOBinding
from .lora import with_adapters
from .options import ExecutionMode, GraphOptimizationLevel, RunOptions, SessionOptions
from .ortvalue import OrtValue
from .report import PartitionReport, build_report

__all__ = ["InferenceSession"]


#: ProviderContext.optimization_level by session level.
_LEVEL_NAMES = {
    GraphOptimizationLevel.ORT_DISABLE_ALL: "disable",
    GraphOptimizationLevel.ORT_ENABLE_BASIC: "basic",
    GraphOptimizationLevel.ORT_ENABLE_EXTENDED: "extended",
    GraphOptimizationLevel.ORT_ENABLE_LAYOUT: "layout",
    GraphOptimizationLevel.ORT_ENABLE_ALL: "all",
}


def _release(providers: list[Provider], models: list[ir.Model]) -> None:
    """Close the providers and let go of the session's own models' weights (their graphs'
    reference cycles would keep the arrays until the garbage collector's next full pass)."""
    for provider in providers:
        provider.close()
    for model in models:
        release_tensors(model)


class InferenceSession:
    """Load a model and run it with the chosen providers.

    :param path_or_bytes: a model path (``str`` / ``os.PathLike``) or serialized ``bytes``.
    :param sess_options: :class:`SessionOptions` (positional or keyword).
    :param providers: provider names or ``(name, options)`` tuples, highest priority first.
    :param provider_options: a list of option dicts aligned with ``providers``.
    :param environment: the plugin :class:`~onnxplug.Environment` (default: the installed plugins).
    """

    def __init__(
        self,
        path_or_bytes: str | bytes | os.PathLike,
        sess_options: SessionOptions | None = None,
        providers: Sequence[Any] | None = None,
        provider_options: Sequence[dict] | None = None,
        *,
        environment: Environment | None = None,
        **kwargs: Any,
    ) -> None:
        self._sess_options = copy.copy(sess_options) if sess_options is not None else SessionOptions()
        libraries = self._sess_options.__dict__.get("_op_libraries", [])
        self._environment = (environment or default_environment()).with_libraries(libraries)
        self._fallback = bool(int(kwargs.pop("enable_fallback", 1)))
        read_config = kwargs.pop("read_config_from_model", None)
        if kwargs:
            raise TypeError(f"InferenceSession got unexpected keyword arguments {sorted(kwargs)}")
        options = self._sess_options
        self._profiler = Profiler(options.profile_file_prefix) if options.enable_profiling else None
        self._logger = session_logger(options)
        start = time.perf_counter_ns()
        self._source = ModelSource(path_or_bytes, options)  # what set_providers builds from again
        self._logger.info("loaded in %.2f s", (time.perf_counter_ns() - start) / 1e9)
        if self._profiler is not None:
            loading = "model_loading_uri" if self._source.path is not None else "model_loading_array"
            self._profiler.session_event(loading, start, time.perf_counter_ns())
        apply_model_config(options, self._source.proto, read_config)  # ORT_LOAD_CONFIG_FROM_MODEL
        apply_global_threads(options)  # set_global_thread_pool_sizes
        if self._profiler is None and options.enable_profiling:  # enabled by the model's config
            self._profiler = Profiler(options.profile_file_prefix)
        # BLAS threads at intra_op_num_threads during run, governed (_blas_threads)
        self._threads = controller_for(options.intra_op_num_threads, options._entries().get(ADAPTIVE_THREADS_KEY, ""))
        self._providers: list[Provider] = []
        self._plan: GraphPlan | None = None
        self._optimized: OptimizedModel | None = None
        self._partitioned: PartitionedModel | None = None
        self._parallel: ParallelExecutor | None = None
        self._run_capture: SessionCapture | None = None
        start = time.perf_counter_ns()
        self._create(parse_providers(providers, provider_options))
        if self._profiler is not None:
            self._profiler.session_event("session_initialization", start, time.perf_counter_ns())
        if self._logger.isEnabledFor(logging.INFO):  # (the counts are worked out only then)
            source, counts = self._source.path or "bytes", self.partition_counts()
            inlined, copies = self._plan.partition.inlined, len(self._plan.copies)
            log_creation(self._logger, source, self.get_providers(), counts, inlined, copies)
        self._environment.notify_session_created(self)

    # -- creation --------------------------------------------------------------------------

    def _create(self, requests: list[tuple[str, dict[str, str]]]) -> None:
        """The pipeline after loading: providers chosen, then optimize → partition → plan.

        The loaded model is never edited; each stage returns a new value.  What of it is kept
        between builds is :class:`._source.ModelSource`'s business.
        """
        try:
            self._build(self._source.loaded(), requests)
        finally:
            self._source.built()

    def _build(self, loaded: LoadedModel, requests: list[tuple[str, dict[str, str]]]) -> None:
        proto = loaded.proto
        overrides = self._sess_options.__dict__.get("_dim_overrides", {})
        denotations = self._sess_options.__dict__.get("_denotation_overrides", {})
        self._input_specs, self._inputs, self._overridable = input_specs(
            proto.graph, overrides, denotations, overridable_initializers=proto.ir_version >= 4
        )
        self._check_feeds = FeedChecker(self._input_specs)
        inferred = {v.name: v for v in proto.graph.value_info}
        self._outputs = output_args(proto.graph, inferred)
        self._meta = ModelMetadata.from_proto(proto)
        chosen = select_factories(self._environment, requests, fallback=self._fallback)
        providers = create_providers(self._environment, chosen, self._provider_context())
        try:
            slots = [ProviderSlot(p, KernelLookup(self._environment.kernel_registries(p))) for p in providers]
            start = time.perf_counter()
            self._optimized = self._optimize(loaded, slots)
            self._source.taken()  # a model read again is now the optimized one (large bytes: kept)
            if self._logger.isEnabledFor(logging.INFO):  # (counting the nodes walks the graph)
                fusions = self._optimized.fusions()
                self._logger.info(
                    "optimized in %.2f s: %d -> %d nodes%s",
                    time.perf_counter() - start,
                    self._optimized.nodes_before,
                    self._optimized.nodes_after,
                    f", fusions {fusions}" if fusions else "",
                )
            start = time.perf_counter()
            self._partitioned = partition_model(self._optimized.model, self._optimized.opsets, slots)
            self._logger.info("partitioned in %.2f s", time.perf_counter() - start)
            start = time.perf_counter()
            self._plan = build_plan(self._partitioned, slots, fallback=self._fallback)
            self._logger.info("planned in %.2f s (kernels built, partitions compiled)", time.perf_counter() - start)
            self._run_capture = SessionCapture.for_session(providers, self._plan.order)
        except BaseException:
            for provider in providers:
                provider.close()
            raise
        self._providers = providers
        # Providers hold device memory, compiled engines, vendor handles, and the stages' models
        # hold the weights: release them when the session is collected without close() (the
        # finalizer holds them, not the session).
        owned = [self._optimized.model, self._partitioned.model]
        self._finalizer = weakref.finalize(self, _release, list(providers), owned)
        # the first position of each name (a graph may list one value as two outputs)
        self._output_index: dict[str, int] = {}
        for index, name in enumerate(self._plan.output_names):
            self._output_index.setdefault(name, index)
        options = self._sess_options
        if options.execution_mode == ExecutionMode.ORT_PARALLEL:
            self._parallel = ParallelExecutor(self._plan, options.inter_op_num_threads)
        if options.optimized_model_filepath:
            write_optimized_model(
                self._optimized.model,
                proto,
                loaded.base_dir,
                options.optimized_model_filepath,
                options._entries(),
            )

    def _provider_context(self) -> ProviderContext:
        options = self._sess_options
        level = GraphOptimizationLevel(int(options.graph_optimization_level))
        return ProviderContext(
            intra_op_num_threads=int(options.intra_op_num_threads),
            inter_op_num_threads=int(options.inter_op_num_threads),
            optimization_level=_LEVEL_NAMES[level],
            enable_profiling=bool(options.enable_profiling),
            config=dict(options._entries()),
            cache=default_compile_cache(options._entries().get(COMPILE_CACHE_KEY) or None),
        )

    def _optimize(self, loaded: LoadedModel, slots: list[ProviderSlot]) -> OptimizedModel:
        """The optimizer stage for these providers (their kernels decide which rule sets apply);
        a loaded model read again for the next build (a path's, small bytes') is the optimizer's to edit."""
        level = int(self._sess_options.graph_optimization_level)
        names = {slot.provider.name for slot in slots}

        # A fused op must be runnable by the provider asked first: fusing for the CPU provider
        # would take nodes away from a provider ahead of it that runs them unfused (OpenVINO
        # compiles MatMul + Add + Relu, not com.microsoft FusedGemm).
        first = slots[0].kernels if slots else KernelLookup()
        gate = shared_gate(self._environment, names, first)
        rule_sets = {stage: self._environment.rewrite_rules(stage) for stage in stages_for_level(level)}
        initializers = {
            name: np.asarray(value._onnxplug_value())
            for name, value in self._sess_options.__dict__.get("_initializers", {}).items()
        }
        return optimize(
            loaded.model,
            level,
            rule_sets=rule_sets,
            gate=gate,
            evaluate=KernelEvaluator(slots),
            node_opsets=node_opsets,
            initializers=initializers,
            handed_over=self._source.reads_again,
        )

    # -- introspection ---------------------------------------------------------------------

    def get_inputs(self) -> list[NodeArg]:
        """Graph inputs that are not initializers, in graph order."""
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        """Graph outputs in graph order, with inferred shapes."""
        return list(self._outputs)

    def get_overridable_initializers(self) -> list[NodeArg]:
        """Initializers that are also graph inputs (feeding them overrides the value)."""
        return list(self._overridable)

    def get_modelmeta(self) -> ModelMetadata:
        return self._meta

    def get_providers(self) -> list[str]:
        """onnxruntime names of the providers in effect, CPU last."""
        return [p.ort_name for p in self._providers]

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return {p.ort_name: ({} if p.ort_name == "CPUExecutionProvider" else dict(p.options)) for p in self._providers}

    def get_session_options(self) -> SessionOptions:
        return copy.copy(self._sess_options)

    def partition_counts(self) -> dict[str, int]:
        """How many nodes of the main graph each provider runs (onnxruntime names)."""
        return self._require_plan().partition.counts()

    def get_partition_report(self) -> PartitionReport:
        """Which provider runs each node of the main graph, fused partitions, copies and the
        reasons providers gave for declining nodes (see :class:`~onnxplug.PartitionReport`)."""
        plan = self._require_plan()
        constants = list(plan.graph.initializers)
        return build_report(
            plan.graph, plan.order, constants, plan.copies, plan.partition.declined, self.get_providers()
        )

    def get_optimization_report(self) -> OptimizedModel:
        """What the optimizer did for this session: the optimized model, one report per pass
        (node counts before and after, what changed), and the rule sets not applied with why.

        The model is a copy (sharing the weights' arrays), so it outlives the session intact:
        the session lets go of its own when it is closed or collected.
        """
        self._require_plan()
        assert self._optimized is not None
        return dataclasses.replace(self._optimized, model=self._optimized.model.clone())

    def _require_plan(self) -> GraphPlan:
        if self._plan is None:
            raise NoModel("the session has no model (a previous set_providers call failed)")
        return self._plan

    # -- running ---------------------------------------------------------------------------

    def run(
        self, output_names: Sequence[str] | None, input_feed: dict[str, Any], run_options: RunOptions | None = None
    ) -> list[Any]:
        """Run the model.

        :param output_names: outputs to return (``None`` or ``[]``: all, in graph order).
        :param input_feed: ``{input name: value}``.
        :param run_options: per-call options (``terminate`` stops the run).
        :returns: a list with one value per requested output.
        """
        plan = self._require_plan()
        # A small model's run costs a few microseconds: every line here counts (see the
        # six-nodes figures in docs/benchmarks.md).
        indices = None if output_names is None else self._output_indices(output_names)
        if run_options is not None:
            input_feed = with_adapters(input_feed, run_options)  # RunOptions.add_active_adapter
        feeds = self._check_feeds(input_feed)
        inputs = [feeds.get(name, default) for name, default in plan.input_defaults()]
        profiler = self._profiler
        start = profiler.now() if profiler is not None else 0
        state = RunState(run_options)
        token = enter_run(state)
        try:
            threads = self._threads
            if threads is None:
                results = self._execute(plan, inputs, profiler)
            else:
                saved = threads.enter(inputs)
                state.threads = threads.threads_of(saved)
                try:
                    results = self._execute(plan, inputs, profiler)
                finally:
                    threads.leave(saved, touched=bool(state.notes))
        finally:
            leave_run(token)
        if profiler is not None:
            profiler.session_event("model_run", start, profiler.now())
        return fresh_outputs(results if indices is None else [results[i] for i in indices])

    def _run_on_devices(
        self,
        output_names: Sequence[str],
        feeds: dict[str, Any],
        keep: Sequence[bool],
        run_options: RunOptions | None,
        synchronize: bool = True,
    ) -> list[tuple[Any, Any]]:
        """IOBinding's run: device feeds in, outputs flagged in ``keep`` left on their device
        (see :func:`._device_run.run_on_devices`)."""
        return run_on_devices(self, self._require_plan(), output_names, feeds, keep, run_options, synchronize)

    # NaN, infinities and integer wrap-around are ONNX results, never warnings: one errstate per
    # run instead of one per kernel call (entering one costs more than a small Add), as a
    # decorator, which builds its state once (0.35 µs a run against 0.7 for a `with` block).
    # The parallel executor's tasks run in copies of this context, so they inherit it.
    @np.errstate(all="ignore")
    def _execute(self, plan: GraphPlan, inputs: list[Any], profiler: Profiler | None) -> list[Any]:
        if self._parallel is not None:
            return self._parallel.execute(inputs, profiler)
        return plan.execute(inputs, profiler=profiler)

    # -- profiling -------------------------------------------------------------------------

    def end_profiling(self) -> str:
        """Write the trace (Chrome trace JSON) and stop profiling; returns the file's path, or
        ``""`` when profiling is off or already ended."""
        profiler, self._profiler = self._profiler, None
        return "" if profiler is None else profiler.write()

    def get_profiling_start_time_ns(self) -> int:
        """Epoch nanoseconds at which profiling started (0 when it is off), as onnxruntime."""
        return 0 if self._profiler is None else self._profiler.start_time_ns

    def _output_indices(self, output_names: Sequence[str] | None) -> list[int]:
        if isinstance(output_names, (str, bytes)):
            raise TypeError("output_names must be a list of names (or None), not a string")
        if not output_names:
            return list(range(len(self._require_plan().output_names)))
        indices = []
        for name in output_names:
            index = self._output_index.get(name)
            if index is None:
                raise InvalidArgument(
                    f"Invalid output name: {name} (the model's outputs are {list(self._output_index)})"
                )
            indices.append(index)
        return indices

    def _input_names(self) -> set[str]:
        return {spec.name for spec in self._input_specs}

    def run_with_ort_values(
        self,
        output_names: Sequence[str] | None,
        input_dict_ort_values: dict[str, Any],
        run_options: RunOptions | None = None,
    ) -> list[OrtValue]:
        """Like :meth:`run` with OrtValues in and out (numpy arrays are accepted in too)."""
        return [OrtValue(v) for v in self.run(output_names, input_dict_ort_values, run_options)]

    def io_binding(self) -> IOBinding:
        return IOBinding(self)

    def run_with_iobinding(self, iobinding: IOBinding, run_options: RunOptions | None = None) -> None:
        if iobinding._session is not self:
            raise ValueError("IOBinding must be used with the session that created it.")
        iobinding._run(run_options)

    def run_async(
        self,
        output_names: Sequence[str] | None,
        input_feed: dict[str, Any],
        callback: Callable[[list[Any], Any, str], None],
        user_data: Any,
        run_options: RunOptions | None = None,
    ) -> None:
        """Run on a worker thread and call ``callback(results, user_data, error_message)``.

        Missing inputs are reported at once (as onnxruntime does); any other failure reaches the
        callback with ``results == []`` and the message in ``error_message``.
        """
        self._check_feeds(input_feed)
        self._output_indices(output_names)

        def work() -> None:
            try:
                results = self.run(output_names, input_feed, run_options)
            except Exception as error:  # noqa: BLE001 - handed to the callback, as onnxruntime does
                callback([], user_data, str(error))
                return
            callback(results, user_data, "")

        threading.Thread(target=work, name="onnxplug-run-async", daemon=True).start()

    def set_providers(
        self, providers: Sequence[Any] | None = None, provider_options: Sequence[dict] | None = None
    ) -> None:
        """Rebuild the session with other providers.  No fallback: an unknown or unavailable
        provider raises, and the session holds no model until a valid call."""
        requests = parse_providers(providers, provider_options)
        self.close()
        fallback, self._fallback = self._fallback, False
        try:
            self._create(requests)
        except InvalidArgument as error:
            raise RuntimeError(str(error.message)) from error
        finally:
            self._fallback = fallback

    def disable_fallback(self) -> None:
        """Unknown or unavailable providers become errors (instead of warnings)."""
        self._fallback = False

    def enable_fallback(self) -> None:
        self._fallback = True

    def close(self) -> None:
        """Release the providers' resources (the session cannot run afterwards)."""
        if self._parallel is not None:
            self._parallel.close()
            self._parallel = None
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer()  # closes each provider once; later calls (and collection) do nothing
        self._providers = []
        self._plan = None
        self._optimized = self._partitioned = None
        self._run_capture = None

    @property
    def _model_proto(self) -> onnx.ModelProto:
        return self._source.proto

    # -- onnxruntime introspection (see _session_info) --------------------------------------

    def get_provider_graph_assignment_info(self) -> list:
        """The nodes each provider runs, as ``OrtEpAssignedSubgraph`` objects (``ep_name``,
        ``get_nodes()``); needs the config entry ``session.record_ep_graph_assignment_info=1``."""
        return assignment_info(self._sess_options._entries(), self.get_partition_report())

    def get_input_memory_infos(self) -> list:
        """One ``OrtMemoryInfo`` per input of :meth:`get_inputs` (host memory)."""
        return memory_infos(len(self._inputs))

    def get_output_memory_infos(self) -> list:
        """One ``OrtMemoryInfo`` per output of :meth:`get_outputs` (host memory)."""
        return memory_infos(len(self._outputs))

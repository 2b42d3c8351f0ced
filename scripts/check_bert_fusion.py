"""Done-when check for the optimizer's fusions on BERT-base (a script, not a CI test: the export is slow).

Exports BERT-base (transformers ``BertConfig()`` defaults, random weights, batch 1, sequence 128,
the last 28 positions padded, TorchScript exporter) to a temporary folder, runs it through onnxplug
at ORT_DISABLE_ALL and at ORT_ENABLE_ALL, and prints the node counts and op histograms of both,
the number of attention / SkipLayerNormalization / BiasGelu nodes, and the largest absolute
difference between the two runs' outputs.

Until sessions run the optimizer themselves, a session at ORT_ENABLE_ALL that fuses nothing is
replaced by ``onnxplug.optimizer.apply_rule_sets`` with the ms_ops rule sets (the "basic" and
"extended" stages) followed by a session at ORT_DISABLE_ALL; the script prints which path it took.

Usage (repository root, test venv)::

    python scripts/check_bert_fusion.py                 # eager attention, what older exports hold
    python scripts/check_bert_fusion.py --attn sdpa     # transformers' default implementation today
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import sys
import tempfile
import time
import warnings

import numpy as np

SEQ = 128
PADDED = 28
FUSED_KINDS = ("Attention", "MultiHeadAttention", "SkipLayerNormalization", "BiasGelu")


def export(folder: pathlib.Path, attn: str) -> tuple[pathlib.Path, dict[str, np.ndarray]]:
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig(attn_implementation=attn), add_pooling_layer=False).eval()
    rng = np.random.default_rng(0)
    feeds = {
        "input_ids": rng.integers(0, model.config.vocab_size, size=(1, SEQ), dtype=np.int64),
        "attention_mask": np.concatenate([np.ones((1, SEQ - PADDED)), np.zeros((1, PADDED))], axis=1).astype(np.int64),
    }

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, input_ids, attention_mask):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    path = folder / "bert-base.onnx"
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Wrap().eval(),
            args,
            str(path),
            dynamo=False,
            input_names=list(feeds),
            output_names=["last_hidden_state"],
            dynamic_axes={name: {0: "batch", 1: "seq"} for name in feeds},
            opset_version=17,
        )
    return path, feeds


def session(model, level):
    import onnxplug

    options = onnxplug.SessionOptions()
    options.graph_optimization_level = level
    return onnxplug.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def histogram(sess) -> collections.Counter:
    return collections.Counter(
        f"{node.domain}::{node.op_type}" if node.domain else node.op_type for node in sess.get_partition_report().nodes
    )


def fused_count(ops: collections.Counter) -> int:
    return sum(n for op, n in ops.items() if op.split("::")[-1] in FUSED_KINDS)


def fallback(path: pathlib.Path):
    """apply_rule_sets with the ms_ops rule sets, then a session that optimizes nothing more."""
    import onnx
    import onnx_ir as ir

    import onnxplug
    from onnxplug.optimizer import apply_rule_sets
    from onnxplug_ms_ops.rules import rule_sets

    model = ir.from_proto(onnx.shape_inference.infer_shapes(onnx.load(path)))
    result = apply_rule_sets(model, [s for stage in ("basic", "extended") for s in rule_sets(stage)])
    print(f"  rule sets applied: {result.applied}")
    proto = ir.to_proto(result.model).SerializeToString()
    return session(proto, onnxplug.GraphOptimizationLevel.ORT_DISABLE_ALL)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attn", choices=["eager", "sdpa"], default="eager")
    args = parser.parse_args(argv)
    import onnxplug

    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        path, feeds = export(pathlib.Path(tmp), args.attn)
        print(
            f"exported BERT-base ({args.attn} attention) in {time.perf_counter() - start:.0f} s, "
            f"{path.stat().st_size / 2**20:.0f} MiB"
        )
        plain = session(str(path), onnxplug.GraphOptimizationLevel.ORT_DISABLE_ALL)
        full = session(str(path), onnxplug.GraphOptimizationLevel.ORT_ENABLE_ALL)
        before, after = histogram(plain), histogram(full)
        if fused_count(after) == 0:
            print("path: the session at ORT_ENABLE_ALL fused nothing; fallback to apply_rule_sets (ms_ops rule sets)")
            full = fallback(path)
            after = histogram(full)
        else:
            print("path: the session at ORT_ENABLE_ALL fused by itself")
        for title, ops in (("ORT_DISABLE_ALL", before), ("ORT_ENABLE_ALL", after)):
            print(f"{title}: {sum(ops.values())} nodes")
            print("  " + ", ".join(f"{op}={n}" for op, n in ops.most_common()))
        for kind in FUSED_KINDS:
            print(f"{kind}: {sum(n for op, n in after.items() if op.split('::')[-1] == kind)}")
        (want,) = plain.run(None, feeds)
        (got,) = full.run(None, feeds)
        print(f"max abs difference of outputs: {float(np.max(np.abs(got - want))):.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

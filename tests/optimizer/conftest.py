"""The optimizer test template: build a model, run it unfused, apply rule sets, check the op
histogram, run the rewritten model and compare (onnxscript's template)."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnx_ir as ir
import pytest

import onnxplug
from onnxplug.optimizer import apply_rule_sets


def to_ir(model: onnx.ModelProto) -> ir.Model:
    """The model as the loader hands it on: shape-inferred, then onnx-ir."""
    return ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(model, strict_mode=True))


def run_unoptimized(model: onnx.ModelProto | ir.Model, feeds: dict) -> list:
    """Run through onnxplug with every optimization off, so only the rule sets under test act."""
    if isinstance(model, ir.Model):
        model = ir.serde.serialize_model(model)
    options = onnxplug.SessionOptions()
    options.graph_optimization_level = onnxplug.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxplug.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def run_onnxruntime(model: ir.Model, feeds: dict) -> list | None:
    """The rewritten model on onnxruntime (the oracle for what the contrib ops mean), every
    optimization off; ``None`` without onnxruntime."""
    try:
        import onnxruntime
    except ImportError:
        return None
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    proto = ir.serde.serialize_model(model).SerializeToString()
    return onnxruntime.InferenceSession(proto, options, providers=["CPUExecutionProvider"]).run(None, feeds)


def histogram(model: ir.Model) -> dict[str, int]:
    """``{"Op": count}`` over the main graph, ``"domain.Op"`` outside the ONNX domain."""
    return dict(collections.Counter(f"{n.domain}.{n.op_type}" if n.domain else n.op_type for n in model.graph))


class Fusion:
    """Runs the template on one model; returns the rewritten onnx-ir model."""

    to_ir = staticmethod(to_ir)
    run = staticmethod(run_unoptimized)
    run_onnxruntime = staticmethod(run_onnxruntime)
    histogram = staticmethod(histogram)

    def apply(self, model: onnx.ModelProto, rule_sets) -> tuple[ir.Model, dict[str, int]]:
        result = apply_rule_sets(to_ir(model), rule_sets)
        return result.model, result.applied

    def check(self, model, rule_sets, feeds, expected_ops, *, rtol=1e-5, atol=1e-5):
        want = run_unoptimized(model, feeds)
        fused, applied = self.apply(model, rule_sets)
        assert histogram(fused) == expected_ops, applied
        onnx.checker.check_model(ir.serde.serialize_model(fused))
        got = run_unoptimized(fused, feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
        # the rewrite also means the same under onnxruntime's definitions of the contrib ops
        for theirs, w in zip(run_onnxruntime(fused, feeds) or (), want):
            np.testing.assert_allclose(theirs, w, rtol=max(rtol, 1e-4), atol=max(atol, 1e-4))
        return fused, applied

    def rejections(self, model, rule_sets) -> list[str]:
        """The reasons the rules' checks gave for turning down a structural match."""
        from onnxscript.rewriter import pattern

        tracer = pattern.MatchingTracer()
        traced = to_ir(model)
        for rule_set in rule_sets:  # with a tracer, onnxscript matches but does not rewrite
            pattern.RewriteRuleSet(list(rule_set.rules)).apply_to_model(traced, tracer=tracer)
        return [
            info.match_result.reason
            for infos in tracer.best_matches_map.values()
            for info in infos
            if info.status == pattern.MatchStatus.CONDITION_FAILED
        ]

    def assert_unchanged(self, model, rule_sets, reason: str | None = None):
        """No rewrite; with ``reason``, a rule's check turned the match down saying so."""
        fused, applied = self.apply(model, rule_sets)
        assert sum(applied.values()) == 0, applied
        assert histogram(fused) == histogram(to_ir(model))
        if reason is not None:
            reasons = self.rejections(model, rule_sets)
            assert any(reason in r for r in reasons), reasons


@pytest.fixture
def fusion():
    return Fusion()


@pytest.fixture
def rng():
    return np.random.default_rng(20261202)

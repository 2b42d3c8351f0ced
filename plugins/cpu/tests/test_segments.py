"""Segments (``onnxplug.runtime._segments``): runs of convolutions whose kernels bind, replayed
over planned buffers from a plan's third run on.

The contract checked here: a replayed run gives the same bits as the same session without
segments (``ONNXPLUG_SEGMENTS=0``) on every run, for every input shape, on concurrent threads;
nothing a run returned changes when the next one runs; a value read inside a segment that is
also a graph output is returned whole; a change of the run's settings (the tiles switched off)
falls back to plain steps; an input of another shape is checked by the kernels as before and the
error names the node; and the buffer plan never gives two live values one buffer.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplug
from onnxplug.runtime._segment_layout import plan_buffers
from onnxplug.runtime._steps import Step

RUNS = 4  # record, bind, then replays


def _conv(name, x, w, y, rng, *, group=1, stride=1, pads=(1, 1, 1, 1)):
    """A Conv node and its initializers (weights ``w`` shaped ``(M, C/group, k, k)``)."""
    weights = numpy_helper.from_array((rng.standard_normal(w) * 0.2).astype(np.float32), f"{name}_w")
    bias = numpy_helper.from_array((rng.standard_normal(w[0]) * 0.1).astype(np.float32), f"{name}_b")
    node = helper.make_node(
        "Conv", [x, weights.name, bias.name], [y], name=name, group=group, strides=[stride, stride], pads=list(pads)
    )
    return node, [weights, bias]


def _model(*, extra_output: bool = False, shape=(1, "c", "h", "w")) -> bytes:
    """x (1, 8, H, W) → 3×3 conv + Relu (``ar``) → depthwise 3×3 + Clip → 1×1 conv + ``ar`` →
    3×3/2 conv: a MobileNet block's shape, which the optimizer fuses into FusedConv nodes (the
    last but one with its residual where ``shape`` is static)."""
    rng = np.random.default_rng(7)
    nodes, inits = [], []
    for node, extra in (
        _conv("wide", "x", (16, 8, 3, 3), "a", rng),
        _conv("depthwise", "ar", (16, 1, 3, 3), "d", rng, group=16),
        _conv("narrow", "dc", (16, 16, 1, 1), "n", rng, pads=(0, 0, 0, 0)),
        _conv("down", "r", (12, 16, 3, 3), "y", rng, stride=2),
    ):
        nodes.append(node)
        inits += extra
    low = numpy_helper.from_array(np.array(0.0, np.float32), "low")
    high = numpy_helper.from_array(np.array(6.0, np.float32), "high")
    inits += [low, high]
    nodes.insert(1, helper.make_node("Relu", ["a"], ["ar"], name="relu"))
    nodes.insert(3, helper.make_node("Clip", ["d", "low", "high"], ["dc"], name="clip"))
    nodes.insert(5, helper.make_node("Add", ["n", "ar"], ["r"], name="residual"))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if extra_output:
        outputs.append(helper.make_tensor_value_info("dc", TensorProto.FLOAT, None))
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))], outputs, inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _session(model: bytes, monkeypatch, *, segments: bool, shape=(1, 8, 6, 6)) -> onnxplug.InferenceSession:
    """A session whose plan is built with segments on or off (read at its first run)."""
    monkeypatch.setenv("ONNXPLUG_SEGMENTS", "1" if segments else "0")
    session = onnxplug.InferenceSession(model, providers=["CPUExecutionProvider"])
    session.run(None, {"x": np.zeros(shape, np.float32)})
    monkeypatch.delenv("ONNXPLUG_SEGMENTS")
    return session


def _feed(shape, seed):
    return {"x": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


def _segment_sizes(session) -> list[int]:
    straight = session._plan._straight
    return [len(segment.steps) for segment in straight.segments]


@pytest.mark.parametrize("extra_output", [False, True], ids=["one output", "inner value also an output"])
def test_replayed_runs_give_the_bits_of_plain_steps(monkeypatch, extra_output):
    model = _model(extra_output=extra_output, shape=(1, 8, 20, 24))
    replayed = _session(model, monkeypatch, segments=True, shape=(1, 8, 20, 24))
    plain = _session(model, monkeypatch, segments=False, shape=(1, 8, 20, 24))
    # the four convolutions, the residual's add in the last but one's store
    assert _segment_sizes(replayed) == [4] and not _segment_sizes(plain)
    for run in range(RUNS):
        feed = _feed((1, 8, 20, 24), run)
        for got, want in zip(replayed.run(None, feed), plain.run(None, feed)):
            np.testing.assert_array_equal(got, want)


def test_values_returned_are_not_overwritten_by_the_next_run(monkeypatch):
    session = _session(_model(extra_output=True), monkeypatch, segments=True)
    kept = []
    for run in range(RUNS + 2):
        outputs = session.run(None, _feed((1, 8, 16, 16), run))
        kept.append((outputs, [o.copy() for o in outputs]))
    for outputs, copies in kept:
        for output, copy in zip(outputs, copies):
            np.testing.assert_array_equal(output, copy)


def test_input_shapes_alternating_each_keep_their_binding(monkeypatch):
    model = _model()
    replayed = _session(model, monkeypatch, segments=True)
    plain = _session(model, monkeypatch, segments=False)
    shapes = [(1, 8, 12, 12), (1, 8, 9, 17), (1, 8, 30, 8)]
    for run in range(3 * RUNS):
        feed = _feed(shapes[run % len(shapes)], run)
        np.testing.assert_array_equal(replayed.run(None, feed)[0], plain.run(None, feed)[0])


def test_concurrent_runs_use_memory_of_their_own(monkeypatch):
    model = _model()
    replayed = _session(model, monkeypatch, segments=True)
    plain = _session(model, monkeypatch, segments=False)
    shapes = [(1, 8, 14, 14), (1, 8, 10, 22)]
    feeds = [_feed(shape, seed) for seed, shape in enumerate(shapes)]
    expected = [plain.run(None, feed)[0] for feed in feeds]
    failures: list[str] = []

    def work(which: int) -> None:
        for _ in range(30):
            got = replayed.run(None, feeds[which])[0]
            if not np.array_equal(got, expected[which]):
                failures.append(f"thread {which}: results differ")
                return

    threads = [threading.Thread(target=work, args=(i % 2,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


def test_a_change_of_run_settings_falls_back_to_plain_steps(monkeypatch):
    model = _model()
    replayed = _session(model, monkeypatch, segments=True)
    plain = _session(model, monkeypatch, segments=False)
    feed = _feed((1, 8, 16, 16), 3)
    for _ in range(RUNS):
        np.testing.assert_array_equal(replayed.run(None, feed)[0], plain.run(None, feed)[0])
    monkeypatch.setenv("ONNXPLUG_CPU_CONV_TILE", "0")  # the guard's settings change
    reference = plain.run(None, feed)[0]
    for _ in range(2):
        np.testing.assert_array_equal(replayed.run(None, feed)[0], reference)
    monkeypatch.delenv("ONNXPLUG_CPU_CONV_TILE")
    for _ in range(RUNS):
        np.testing.assert_array_equal(replayed.run(None, feed)[0], plain.run(None, feed)[0])


def test_an_input_of_the_wrong_channels_names_the_node_after_replays(monkeypatch):
    session = _session(_model(), monkeypatch, segments=True)
    for run in range(RUNS):
        session.run(None, _feed((1, 8, 12, 12), run))
    with pytest.raises(onnxplug.OnnxplugError, match="FusedConv node"):
        session.run(None, _feed((1, 5, 12, 12), 0))
    session.run(None, _feed((1, 8, 12, 12), 0))  # and the session runs on


def test_segments_off_leaves_the_steps_alone(monkeypatch):
    session = _session(_model(), monkeypatch, segments=False)
    session.run(None, _feed((1, 8, 12, 12), 0))
    assert _segment_sizes(session) == []


def _steps(edges: list[tuple[int, ...]]) -> list[Step]:
    """Steps where step ``i`` writes slot ``10 + i`` and reads the slots in ``edges[i]``."""
    return [
        Step(lambda *a: None, tuple(inputs), (10 + index,), True, f"s{index}", "Op", "cpu", index)
        for index, inputs in enumerate(edges)
    ]


@pytest.mark.parametrize(
    "edges",
    [
        [(2,), (10,), (11,), (12,), (13,)],  # a chain
        [(2,), (10,), (10, 11), (12,), (11, 13), (14, 10)],  # skips, a residual read late
        [(2,), (2,), (10, 11), (12,), (12, 13)],  # two branches joined
    ],
)
def test_the_buffer_plan_never_shares_a_buffer_between_live_values(edges):
    steps = _steps(edges)
    shapes = [((1, 4 + 3 * (index % 3), 5, 5), np.dtype(np.float32)) for index in range(len(steps))]
    owner, sizes = plan_buffers(steps, shapes, exits={10 + len(steps) - 1})
    last = {
        index: max([index] + [j for j, inputs in enumerate(edges) if 10 + index in inputs])
        for index in range(len(steps))
    }
    assert owner[-1] is None  # the exit: a fresh array each run
    for index, buffer in enumerate(owner[:-1]):
        assert sizes[buffer] >= np.prod(shapes[index][0]) * 4
        for other in range(index):
            if owner[other] == buffer:  # the earlier value is dead before this one is written
                assert last[other] < index


def _around(middle, first: tuple, last: tuple, shape: tuple, seed: int, *, stride=1, last_pads=(1, 1, 1, 1)) -> bytes:
    """x → Conv (weights ``first``, ``stride``) → ``middle`` (a node from "m" to "n") → Conv
    (weights ``last``): a static ``shape``."""
    rng = np.random.default_rng(seed)
    before, before_inits = _conv("before", "x", first, "m", rng, stride=stride)
    after, after_inits = _conv("after", "n", last, "y", rng, pads=last_pads)
    graph = helper.make_graph(
        [before, middle, after],
        "around",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        before_inits + after_inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _check_replay(model: bytes, shape: tuple, monkeypatch, segment_sizes: list[int]) -> None:
    replayed = _session(model, monkeypatch, segments=True, shape=shape)
    plain = _session(model, monkeypatch, segments=False, shape=shape)
    assert _segment_sizes(replayed) == segment_sizes
    for run in range(RUNS):
        feed = _feed(shape, run)
        np.testing.assert_array_equal(replayed.run(None, feed)[0], plain.run(None, feed)[0])


@pytest.mark.parametrize("pool", ["MaxPool", "AveragePool"])
def test_a_pool_between_convolutions_joins_their_segment(monkeypatch, pool):
    pooled = helper.make_node(pool, ["m"], ["n"], name="pool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    model = _around(pooled, (16, 8, 3, 3), (24, 16, 3, 3), (1, 8, 48, 40), 11, stride=2)
    _check_replay(model, (1, 8, 48, 40), monkeypatch, [3])


@pytest.mark.parametrize("activation", ["Sigmoid", "Tanh"])
def test_a_convolution_with_its_activation_pass_binds(monkeypatch, activation):
    act = helper.make_node(activation, ["m"], ["n"], name="act")
    model = _around(act, (16, 8, 3, 3), (8, 16, 1, 1), (1, 8, 20, 20), 5, last_pads=(0, 0, 0, 0))
    _check_replay(model, (1, 8, 20, 20), monkeypatch, [2])  # FusedConv with the activation, a Conv

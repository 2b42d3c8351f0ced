"""What joins a segment besides layers (``onnxplug.runtime._segments``, ``_segment_layout``,
``_step_bindings``): Concats written in place, numpy ufunc kernels between layers, a
normalisation, and a step whose kernel declines to bind.

A Concat written in place (``runtime._concat_in_place``) joins a segment whole: its target's
allocation, every producer writing into a view of it and the join itself, the join's array one
planned buffer (or a fresh array each run where it leaves the segment).  Checked here: the bits
are those of the same session without segments on every run (a wrong region, a missed copy or a
shared buffer changes them), a join whose inputs did not all arrive in place copies the others,
nested joins share their array, an array leaving the segment is fresh each run, a join cut by a
step that cannot bind stays out of segments entirely, an element-wise ufunc joins only between
layers (bound, it costs more than a plain call), and a declined step runs inside its segment.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.runtime._concat_in_place import role_of
from onnxplug.runtime._segment_layout import plan_buffers
from onnxplug.runtime._steps import Step
from onnxplug.testing import make_model

RUNS = 4  # record, bind, then replays
RNG = np.random.default_rng(3)


def _conv(name: str, source: str, cin: int, cout: int, k: int, inits: dict) -> list:
    """A Conv and its Relu (one FusedConv once ms_ops fuses them), output ``name``."""
    w = (RNG.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
    b = (RNG.standard_normal(cout) * 0.1).astype(np.float32)
    inits.update({f"{name}_w": w, f"{name}_b": b})
    return [
        helper.make_node(
            "Conv", [source, f"{name}_w", f"{name}_b"], [f"{name}_c"], name=name, kernel_shape=[k, k], pads=[k // 2] * 4
        ),
        helper.make_node("Relu", [f"{name}_c"], [name], name=f"{name}_relu"),
    ]


def _model(nodes: list, inits: dict, shape: tuple, outputs: list[str]) -> bytes:
    inputs = [("x", TensorProto.FLOAT, list(shape))]
    return make_model(nodes, inputs, [(name, TensorProto.FLOAT, None) for name in outputs], inits).SerializeToString()


def _fire(outputs: list[str]) -> bytes:
    """SqueezeNet's fire module and a layer after it: squeeze → two expands joined → a layer."""
    inits: dict = {}
    nodes = [
        *_conv("squeeze", "x", 16, 8, 1, inits),
        *_conv("e1", "squeeze", 8, 32, 1, inits),
        *_conv("e3", "squeeze", 8, 32, 3, inits),
        helper.make_node("Concat", ["e1", "e3"], ["joined"], axis=1, name="join"),
        *_conv("after", "joined", 64, 16, 3, inits),
    ]
    return _model(nodes, inits, (1, 16, 24, 24), outputs)


def _dense_block(layers: int = 3) -> bytes:
    """DenseNet's block: each layer joins the previous join and its new channels (the first join
    copies the graph's input), then a layer after the block."""
    inits: dict = {}
    nodes, previous, channels = [], "x", 16
    for i in range(layers):
        nodes += _conv(f"c{i}", previous, channels, 8, 3, inits)
        nodes.append(helper.make_node("Concat", [previous, f"c{i}"], [f"j{i}"], axis=1, name=f"join{i}"))
        previous, channels = f"j{i}", channels + 8
    nodes += _conv("after", previous, channels, 8, 1, inits)
    return _model(nodes, inits, (1, 16, 32, 32), ["after"])


def _cut_join() -> bytes:
    """A join whose second writer comes after a step that cannot bind (an LRN)."""
    inits: dict = {}
    nodes = [
        *_conv("a", "x", 16, 32, 3, inits),
        helper.make_node("LRN", ["x"], ["n"], name="lrn", size=3),
        *_conv("b", "n", 16, 32, 3, inits),
        helper.make_node("Concat", ["a", "b"], ["joined"], axis=1, name="join"),
        *_conv("after", "joined", 64, 8, 1, inits),
        *_conv("last", "after", 8, 8, 3, inits),
    ]
    return _model(nodes, inits, (1, 16, 24, 24), ["last"])


def _product() -> bytes:
    """Two layers' product (a bare ``np.multiply``) between layers."""
    inits: dict = {}
    nodes = [
        *_conv("a", "x", 16, 16, 3, inits),
        *_conv("b", "a", 16, 16, 1, inits),
        helper.make_node("Mul", ["a", "b"], ["m"], name="product"),
        *_conv("after", "m", 16, 8, 3, inits),
    ]
    return _model(nodes, inits, (1, 16, 20, 20), ["after"])


def _sessions(model: bytes, monkeypatch, shape: tuple):
    """The model with segments on and off (the variable is read at a plan's first run)."""
    sessions = []
    for segments in ("1", "0"):
        monkeypatch.setenv("ONNXPLUG_SEGMENTS", segments)
        session = onnxplug.InferenceSession(model, providers=["CPUExecutionProvider"])
        session.run(None, {"x": np.zeros(shape, np.float32)})
        sessions.append(session)
    monkeypatch.delenv("ONNXPLUG_SEGMENTS")
    return sessions


def _segments(session) -> list[list[str]]:
    return [[step.op_type for step in segment.steps] for segment in session._plan._straight.segments]


def _same_bits(replayed, plain, shape: tuple) -> list[list[np.ndarray]]:
    returned = []
    for run in range(RUNS):
        feed = {"x": np.random.default_rng(run).standard_normal(shape).astype(np.float32)}
        got = replayed.run(None, feed)
        for mine, theirs in zip(got, plain.run(None, feed)):
            np.testing.assert_array_equal(mine, theirs)
        returned.append((got, [array.copy() for array in got]))
    for got, copies in returned:  # nothing a run returned changed since
        for array, copy in zip(got, copies):
            np.testing.assert_array_equal(array, copy)
    return [got for got, _ in returned]


def test_a_fire_module_joins_one_segment_with_the_layer_after_it(monkeypatch):
    replayed, plain = _sessions(_fire(["after"]), monkeypatch, (1, 16, 24, 24))
    assert _segments(replayed) == [["FusedConv", "ConcatTarget", "FusedConv", "FusedConv", "Concat", "FusedConv"]]
    _same_bits(replayed, plain, (1, 16, 24, 24))


@pytest.mark.parametrize(
    "outputs",
    [["after", "joined"], ["after", "e3"]],
    ids=["the join leaves the segment", "a writer's value is an output (copied by the join)"],
)
def test_a_join_whose_values_leave_the_segment(monkeypatch, outputs):
    replayed, plain = _sessions(_fire(outputs), monkeypatch, (1, 16, 24, 24))
    assert len(_segments(replayed)) == 1
    runs = _same_bits(replayed, plain, (1, 16, 24, 24))
    assert not np.shares_memory(runs[-1][1], runs[-2][1])  # a fresh array each run


def test_nested_joins_share_their_array_and_copy_the_graph_input(monkeypatch):
    replayed, plain = _sessions(_dense_block(), monkeypatch, (1, 16, 32, 32))
    (segment,) = _segments(replayed)
    assert segment.count("Concat") == 3 and segment.count("ConcatTarget") == 3
    _same_bits(replayed, plain, (1, 16, 32, 32))


def test_a_join_cut_by_a_step_that_cannot_bind_stays_out_of_segments(monkeypatch):
    replayed, plain = _sessions(_cut_join(), monkeypatch, (1, 16, 24, 24))
    assert _segments(replayed) == [["FusedConv", "FusedConv"]]  # the two layers after the join
    _same_bits(replayed, plain, (1, 16, 24, 24))


def test_an_element_wise_ufunc_joins_the_layers_segment(monkeypatch):
    replayed, plain = _sessions(_product(), monkeypatch, (1, 16, 20, 20))
    assert _segments(replayed) == [["FusedConv", "FusedConv", "Mul", "FusedConv"]]
    _same_bits(replayed, plain, (1, 16, 20, 20))


def test_ufuncs_join_only_between_other_steps(monkeypatch):
    inits: dict = {}
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["squared"], name="square"),
        *_conv("a", "squared", 16, 16, 3, inits),
        *_conv("b", "a", 16, 16, 1, inits),
        helper.make_node("Mul", ["b", "b"], ["m"], name="product"),
        helper.make_node("Add", ["m", "b"], ["y"], name="sum"),
    ]
    replayed, plain = _sessions(_model(nodes, inits, (1, 16, 20, 20), ["y"]), monkeypatch, (1, 16, 20, 20))
    assert _segments(replayed) == [["FusedConv", "FusedConv"]]
    _same_bits(replayed, plain, (1, 16, 20, 20))
    chain = [helper.make_node("Add", ["x" if i == 0 else f"v{i - 1}", "x"], [f"v{i}"]) for i in range(6)]
    replayed, _ = _sessions(_model(chain, [], (1, 16, 20, 20), ["v5"]), monkeypatch, (1, 16, 20, 20))
    assert _segments(replayed) == []


def test_a_view_keeps_its_arrays_buffer_until_its_own_last_reader():
    """Steps 1 and 2 write views of step 0's array (a join's allocation), step 3 reads step 1's
    view: step 0's buffer stays taken until then, though nothing reads step 0 itself."""
    steps = [
        Step(lambda *a: None, inputs, (10 + index,), True, f"s{index}", "Op", "cpu", index)
        for index, inputs in enumerate([(2,), (2, 10), (2, 10), (11,), (13,)])
    ]
    shapes = [((1, 8, 4, 4), np.dtype(np.float32))] * len(steps)
    roots = [0, 0, 0, 3, 4]
    owner, _ = plan_buffers(steps, shapes, exits={14}, roots=roots)
    assert owner[1] is None and owner[2] is None and owner[4] is None  # views, the exit
    assert owner[3] != owner[0]  # step 3 reads a view of step 0's array while writing its own
    # and an exit among an array's views makes the array fresh each run
    owner, _ = plan_buffers(steps, shapes, exits={11, 14}, roots=roots)
    assert owner[0] is None


def _signatures_bound(session) -> list[bool]:
    return [not known.plain for s in session._plan._straight.segments for known in s._signatures.values()]


def _declined(session) -> int:
    """Bound steps of this thread's instances that run their kernel plain (``into_place``)."""
    instances = session._plan._straight._local.arena.instances.values()
    return sum("into_place" in getattr(call, "__qualname__", "") for i in instances for call, _, _ in i.program)


def test_a_step_whose_kernel_declines_runs_inside_the_bound_segment(monkeypatch):
    """A 6×6 average pool over the whole map (no compiled plan serves that window) between two
    layers: called as before, its result copied into its buffer, the layers stay bound."""
    inits: dict = {}
    nodes = [
        *_conv("a", "x", 16, 32, 3, inits),
        helper.make_node("AveragePool", ["a"], ["pooled"], name="pool", kernel_shape=[6, 6]),
        *_conv("after", "pooled", 32, 8, 1, inits),
    ]
    replayed, plain = _sessions(_model(nodes, inits, (1, 16, 6, 6), ["after"]), monkeypatch, (1, 16, 6, 6))
    assert _segments(replayed) == [["FusedConv", "AveragePool", "FusedConv"]]
    _same_bits(replayed, plain, (1, 16, 6, 6))
    assert _signatures_bound(replayed) == [True] and _declined(replayed) == 1


def test_a_normalisation_and_its_relu_bind_between_layers(monkeypatch):
    """DenseNet's BatchNormalization + Relu before a layer (a per-channel affine FusedConv)."""
    inits: dict = {}
    channels = 16
    for name, values in (("scale", 1.5), ("shift", 0.25), ("mean", 0.1), ("var", 2.0)):
        inits[name] = (RNG.random(channels) * values).astype(np.float32)
    nodes = [
        helper.make_node("BatchNormalization", ["x", "scale", "shift", "mean", "var"], ["bn"], name="bn"),
        helper.make_node("Relu", ["bn"], ["r"], name="bn_relu"),
        *_conv("a", "r", channels, 16, 3, inits),
        *_conv("after", "a", 16, 8, 1, inits),
    ]
    replayed, plain = _sessions(_model(nodes, inits, (1, channels, 40, 40), ["after"]), monkeypatch, (1, 16, 40, 40))
    assert _segments(replayed) == [["FusedConv", "FusedConv", "FusedConv"]]
    _same_bits(replayed, plain, (1, channels, 40, 40))
    assert _signatures_bound(replayed) == [True] and _declined(replayed) == 0


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_an_upsampling_joins_a_segment_and_its_join_copies_it(monkeypatch, mode):
    """YOLO's and a UNet's way up: a layer's map resized 2× and joined with a skip layer's (the
    resized map copied by the join, the skip written in place)."""
    inits = {"scales": np.array([1, 1, 2, 2], np.float32)}
    nodes = [
        *_conv("deep", "x", 16, 32, 3, inits),
        helper.make_node("Resize", ["deep", "", "scales"], ["up"], name="up", mode=mode),
        helper.make_node("Resize", ["x", "", "scales"], ["x2"], name="up_input", mode=mode),
        *_conv("skip", "x2", 16, 32, 1, inits),
        helper.make_node("Concat", ["up", "skip"], ["joined"], axis=1, name="join"),
        *_conv("after", "joined", 64, 8, 3, inits),
    ]
    replayed, plain = _sessions(_model(nodes, inits, (1, 16, 16, 16), ["after"]), monkeypatch, (1, 16, 16, 16))
    (segment,) = _segments(replayed)
    assert segment.count("Resize") == 2 and "Concat" in segment
    _same_bits(replayed, plain, (1, 16, 16, 16))
    assert _signatures_bound(replayed) == [True] and _declined(replayed) == 0


def test_a_layer_whose_bias_changes_from_run_to_run_follows_it(monkeypatch):
    """A bias fed as a graph input is a new array each run: a binding that kept the one it was
    bound with would apply it again (the layer then runs its plain call inside the segment)."""
    inits: dict = {}
    nodes = [*_conv("a", "x", 16, 16, 3, inits)]
    nodes.append(helper.make_node("Conv", ["a", "w2", "bias"], ["b"], name="biased", kernel_shape=[3, 3], pads=[1] * 4))
    inits["w2"] = (RNG.standard_normal((16, 16, 3, 3)) * 0.1).astype(np.float32)
    nodes += _conv("after", "b", 16, 8, 1, inits)
    inputs = [("x", TensorProto.FLOAT, [1, 16, 12, 12]), ("bias", TensorProto.FLOAT, [16])]
    model = make_model(nodes, inputs, [("after", TensorProto.FLOAT, None)], inits).SerializeToString()
    sessions = []
    for segments in ("1", "0"):
        monkeypatch.setenv("ONNXPLUG_SEGMENTS", segments)
        session = onnxplug.InferenceSession(model, providers=["CPUExecutionProvider"])
        session.run(None, {"x": np.zeros((1, 16, 12, 12), np.float32), "bias": np.zeros(16, np.float32)})
        sessions.append(session)
    monkeypatch.delenv("ONNXPLUG_SEGMENTS")
    replayed, plain = sessions
    assert _segments(replayed) == [["FusedConv", "Conv", "FusedConv"]]
    x = np.random.default_rng(0).standard_normal((1, 16, 12, 12)).astype(np.float32)
    for run in range(RUNS + 1):
        feed = {"x": x, "bias": np.full(16, float(run), np.float32)}
        np.testing.assert_array_equal(replayed.run(None, feed)[0], plain.run(None, feed)[0])


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no bias"])
def test_a_transposed_upsampling_joins_a_segment(monkeypatch, with_bias):
    """A UNet's way up: ConvTranspose 2×2 stride 2 (its product and interleaving pass bound over
    the segment's scratch), joined with the skip layer's map."""
    inits: dict = {}
    w = (RNG.standard_normal((32, 16, 2, 2)) * 0.2).astype(np.float32)
    inits["up_w"] = w
    up_inputs = ["deep", "up_w"]
    if with_bias:
        inits["up_b"] = (RNG.standard_normal(16) * 0.1).astype(np.float32)
        up_inputs.append("up_b")
    nodes = [
        *_conv("skip", "x", 16, 16, 3, inits),
        helper.make_node("MaxPool", ["skip"], ["pooled"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        *_conv("deep", "pooled", 16, 32, 3, inits),
        helper.make_node("ConvTranspose", up_inputs, ["up"], name="up", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Concat", ["up", "skip"], ["joined"], axis=1, name="join"),
        *_conv("after", "joined", 32, 8, 3, inits),
    ]
    replayed, plain = _sessions(_model(nodes, inits, (1, 16, 32, 32), ["after"]), monkeypatch, (1, 16, 32, 32))
    (segment,) = _segments(replayed)
    assert "ConvTranspose" in segment and "Concat" in segment
    _same_bits(replayed, plain, (1, 16, 32, 32))
    assert _signatures_bound(replayed) == [True] and _declined(replayed) == 0


def test_an_inception_pool_branch_writes_its_relu_into_the_join(monkeypatch):
    """Inception's pool branch (AveragePool then a narrowing 1×1 layer and its Relu) beside a
    layer, joined: the optimizer moves the layer in front of the pool
    (``cpu.pool_after_pointwise``), so the branch ends in a bare Relu writing into the join,
    which binds; the whole block is one segment with the same bits as without segments."""
    inits: dict = {}
    nodes = [
        *_conv("branch", "x", 16, 24, 3, inits),
        helper.make_node("AveragePool", ["x"], ["pooled"], name="pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        *_conv("proj", "pooled", 16, 8, 1, inits),
        helper.make_node("Concat", ["branch", "proj"], ["joined"], axis=1, name="join"),
        *_conv("after", "joined", 32, 8, 3, inits),
    ]
    shape = (1, 16, 32, 32)  # (a join of at least MIN_BYTES: written in place)
    replayed, plain = _sessions(_model(nodes, inits, shape, ["after"]), monkeypatch, shape)
    (segment,) = _segments(replayed)
    assert segment.index("Conv") < segment.index("AveragePool") < segment.index("Relu") < segment.index("Concat")
    relu = next(step for step in replayed._plan._straight.segments[0].steps if step.op_type == "Relu")
    assert type(role_of(relu.call)).__name__ == "Write"  # straight into its view of the join
    _same_bits(replayed, plain, shape)
    assert _signatures_bound(replayed) == [True] and _declined(replayed) == 0

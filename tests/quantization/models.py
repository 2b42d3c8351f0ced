"""Small float models the quantization tests share: an MLP, a CNN and a transformer-like block,
with seeded weights and a sample generator (what a calibration reader would yield)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _init(name, array):
    return numpy_helper.from_array(np.asarray(array, dtype=np.float32), name)


def _model(nodes, inputs, outputs, inits, name):
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model


def mlp(rng):
    """x[4, 32] -> MatMul+Add -> Relu -> MatMul+Add -> Relu -> Gemm."""
    inits = [
        _init("w1", rng.normal(0, 0.25, (32, 64))),
        _init("b1", rng.normal(0, 0.1, (64,))),
        _init("w2", rng.normal(0, 0.2, (64, 48))),
        _init("b2", rng.normal(0, 0.1, (48,))),
        _init("w3", rng.normal(0, 0.2, (10, 48))),
        _init("b3", rng.normal(0, 0.1, (10,))),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h1"], name="mm1"),
        helper.make_node("Add", ["h1", "b1"], ["a1"], name="add1"),
        helper.make_node("Relu", ["a1"], ["r1"], name="relu1"),
        helper.make_node("MatMul", ["r1", "w2"], ["h2"], name="mm2"),
        helper.make_node("Add", ["h2", "b2"], ["a2"], name="add2"),
        helper.make_node("Relu", ["a2"], ["r2"], name="relu2"),
        helper.make_node("Gemm", ["r2", "w3", "b3"], ["y"], name="gemm", transB=1),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 10])
    return _model(nodes, [x], [y], inits, "mlp"), {"x": (4, 32)}


def cnn(rng):
    """x[2, 3, 16, 16] -> Conv+Relu -> MaxPool -> Conv+Relu -> Conv (residual Add) -> GAP -> Flatten -> Gemm."""
    inits = [
        _init("c1w", rng.normal(0, 0.3, (8, 3, 3, 3))),
        _init("c1b", rng.normal(0, 0.1, (8,))),
        _init("c2w", rng.normal(0, 0.15, (16, 8, 3, 3))),
        _init("c2b", rng.normal(0, 0.1, (16,))),
        _init("c3w", rng.normal(0, 0.1, (16, 16, 1, 1))),
        _init("c3b", rng.normal(0, 0.1, (16,))),
        _init("fw", rng.normal(0, 0.3, (16, 5))),
        _init("fb", rng.normal(0, 0.1, (5,))),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "c1w", "c1b"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "c2w", "c2b"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Conv", ["r2", "c3w", "c3b"], ["c3"], name="conv3"),
        helper.make_node("Add", ["c3", "r2"], ["s"], name="residual"),
        helper.make_node("Relu", ["s"], ["r3"], name="relu3"),
        helper.make_node("GlobalAveragePool", ["r3"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], name="fc"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 16, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])
    return _model(nodes, [x], [y], inits, "cnn"), {"x": (2, 3, 16, 16)}


def transformer(rng):
    """x[8, 32] -> single-head self-attention (Q, K, V projections, softmax(QK^T/sqrt d) V, output
    projection) + residual + LayerNorm, then an MLP with a residual."""
    d = 32
    inits = [_init(n, rng.normal(0, 0.18, (d, d))) for n in ("wq", "wk", "wv", "wo")]
    inits += [
        _init("w1", rng.normal(0, 0.18, (d, 64))),
        _init("w2", rng.normal(0, 0.12, (64, d))),
        _init("scale", np.array(1 / np.sqrt(d))),
        _init("gamma", np.ones(d)),
        _init("beta", np.zeros(d)),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"], name="q_proj"),
        helper.make_node("MatMul", ["x", "wk"], ["k"], name="k_proj"),
        helper.make_node("MatMul", ["x", "wv"], ["v"], name="v_proj"),
        helper.make_node("Transpose", ["k"], ["kt"], name="k_t", perm=[1, 0]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"], name="scores"),
        helper.make_node("Mul", ["scores", "scale"], ["scaled"], name="scale_mul"),
        helper.make_node("Softmax", ["scaled"], ["attn"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["attn", "v"], ["ctx"], name="context"),
        helper.make_node("MatMul", ["ctx", "wo"], ["o"], name="o_proj"),
        helper.make_node("Add", ["o", "x"], ["res1"], name="res1"),
        helper.make_node("LayerNormalization", ["res1", "gamma", "beta"], ["ln"], name="ln", axis=-1),
        helper.make_node("MatMul", ["ln", "w1"], ["f1"], name="ff1"),
        helper.make_node("Relu", ["f1"], ["fr"], name="ff_relu"),
        helper.make_node("MatMul", ["fr", "w2"], ["f2"], name="ff2"),
        helper.make_node("Add", ["f2", "ln"], ["y"], name="res2"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, d])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, d])
    return _model(nodes, [x], [y], inits, "transformer"), {"x": (8, d)}


def _silu_conv(nodes, inits, rng, name, x, cin, cout, k, stride):
    """Conv + SiLU (Sigmoid, Mul), the block YOLOv5/v8 exports are made of."""
    inits.append(_init(f"{name}_w", rng.normal(0, 1.2 / np.sqrt(cin * k * k), (cout, cin, k, k))))
    inits.append(_init(f"{name}_b", rng.normal(0, 0.1, (cout,))))
    pad = k // 2
    nodes.append(
        helper.make_node(
            "Conv", [x, f"{name}_w", f"{name}_b"], [f"{name}_c"], name=name, pads=[pad] * 4, strides=[stride] * 2
        )
    )
    nodes.append(helper.make_node("Sigmoid", [f"{name}_c"], [f"{name}_s"], name=f"{name}_sigmoid"))
    nodes.append(helper.make_node("Mul", [f"{name}_c", f"{name}_s"], [f"{name}_y"], name=f"{name}_silu"))
    return f"{name}_y"


def _const(inits, name, array, dtype=np.float32):
    inits.append(numpy_helper.from_array(np.asarray(array, dtype=dtype), name))
    return name


YOLO_CLASSES = 4
YOLO_ANCHORS = 2


def yolo(rng):
    """A YOLOv5-style detector, x[1, 3, 32, 32] -> y[1, 80, 9]: a SiLU conv backbone (stride 2
    convs, a residual and a Concat), two detection scales (stride 8 and 16) whose head does what
    the YOLOv5 export writes — 1×1 Conv, Reshape to (1, anchors, 5 + classes, H, W), Transpose
    to channels-last, Sigmoid, then box decoding on grids: xy = (2·s − 0.5 + grid)·stride,
    wh = (2·s)²·anchor (Slice, Mul, Add, Pow, Concat) — and the scales concatenated into one
    (boxes, 4 + 1 + classes) output: x, y, w, h, objectness, class scores."""
    nodes, inits = [], []
    h = _silu_conv(nodes, inits, rng, "stem", "x", 3, 8, 3, 2)  # 16×16
    h = _silu_conv(nodes, inits, rng, "down1", h, 8, 16, 3, 2)  # 8×8
    r = _silu_conv(nodes, inits, rng, "res1", h, 16, 16, 3, 1)
    nodes.append(helper.make_node("Add", [h, r], ["p3"], name="res1_add"))
    p4 = _silu_conv(nodes, inits, rng, "down2", "p3", 16, 32, 3, 2)  # 4×4
    side = _silu_conv(nodes, inits, rng, "side", p4, 32, 16, 1, 1)
    nodes.append(helper.make_node("Concat", [p4, side], ["p4"], name="neck_concat", axis=1))
    outputs = 5 + YOLO_CLASSES
    two = _const(inits, "two", 2.0)
    scale_outputs = []
    for level, (feature, channels, size, stride) in enumerate((("p3", 16, 8, 8), ("p4", 48, 4, 16))):
        pre = f"det{level}"
        inits.append(
            _init(f"{pre}_w", rng.normal(0, 1.0 / np.sqrt(channels), (YOLO_ANCHORS * outputs, channels, 1, 1)))
        )
        inits.append(_init(f"{pre}_b", rng.normal(0, 0.5, (YOLO_ANCHORS * outputs,))))
        shape = _const(inits, f"{pre}_shape", [1, YOLO_ANCHORS, outputs, size, size], np.int64)
        flat = _const(inits, f"{pre}_flat", [1, -1, outputs], np.int64)
        gy, gx = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
        grid = _const(inits, f"{pre}_grid", (np.stack([gx, gy], -1)[None, None] - 0.5) * stride)
        anchors = np.array([[10, 14], [23, 27]] if level == 0 else [[37, 58], [81, 82]], np.float32)
        anchor_grid = _const(
            inits, f"{pre}_anchor", np.broadcast_to(anchors[None, :, None, None], (1, 2, size, size, 2))
        )
        stride_c = _const(inits, f"{pre}_stride", float(stride) * 2.0)
        nodes += [
            helper.make_node("Conv", [feature, f"{pre}_w", f"{pre}_b"], [f"{pre}_c"], name=f"{pre}_conv"),
            helper.make_node("Reshape", [f"{pre}_c", shape], [f"{pre}_r"], name=f"{pre}_reshape"),
            helper.make_node("Transpose", [f"{pre}_r"], [f"{pre}_t"], name=f"{pre}_transpose", perm=[0, 1, 3, 4, 2]),
            helper.make_node("Sigmoid", [f"{pre}_t"], [f"{pre}_s"], name=f"{pre}_sigmoid"),
            helper.make_node(
                "Split",
                [f"{pre}_s", _const(inits, f"{pre}_split", [2, 2, outputs - 4], np.int64)],
                [f"{pre}_xy", f"{pre}_wh", f"{pre}_conf"],
                name=f"{pre}_split",
                axis=4,
            ),
            # xy = (2·s − 0.5 + grid)·stride, written as s·(2·stride) + (grid − 0.5)·stride
            helper.make_node("Mul", [f"{pre}_xy", stride_c], [f"{pre}_xy2"], name=f"{pre}_xy_mul"),
            helper.make_node("Add", [f"{pre}_xy2", grid], [f"{pre}_xyd"], name=f"{pre}_xy_add"),
            helper.make_node("Mul", [f"{pre}_wh", two], [f"{pre}_wh2"], name=f"{pre}_wh_mul"),
            helper.make_node("Pow", [f"{pre}_wh2", two], [f"{pre}_wh4"], name=f"{pre}_wh_pow"),
            helper.make_node("Mul", [f"{pre}_wh4", anchor_grid], [f"{pre}_whd"], name=f"{pre}_wh_anchor"),
            helper.make_node(
                "Concat", [f"{pre}_xyd", f"{pre}_whd", f"{pre}_conf"], [f"{pre}_box"], name=f"{pre}_concat", axis=4
            ),
            helper.make_node("Reshape", [f"{pre}_box", flat], [f"{pre}_out"], name=f"{pre}_flatten"),
        ]
        scale_outputs.append(f"{pre}_out")
    nodes.append(helper.make_node("Concat", scale_outputs, ["y"], name="detect_concat", axis=1))
    boxes = YOLO_ANCHORS * (8 * 8 + 4 * 4)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, boxes, outputs])
    return _model(nodes, [x], [y], inits, "yolo"), {"x": (1, 3, 32, 32)}


BUILDERS = {"mlp": mlp, "cnn": cnn, "transformer": transformer}


class SampleReader:
    """A CalibrationDataReader-compatible reader over seeded samples (no base class on purpose:
    onnxruntime accepts any object with get_next)."""

    def __init__(self, shapes, count, seed):
        rng = np.random.default_rng(seed)
        self.samples = [{k: rng.normal(0, 1, s).astype(np.float32) for k, s in shapes.items()} for _ in range(count)]
        self.index = 0

    def get_next(self):
        if self.index >= len(self.samples):
            return None
        self.index += 1
        return self.samples[self.index - 1]

    def rewind(self):
        self.index = 0

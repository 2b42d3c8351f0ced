"""A linear op and what follows it, fused into onnxruntime's contrib ops.

- ``FuseConvActivation``: ``act(Conv(x, W[, B]))`` → ``FusedConv(activation=act)`` for Relu, Tanh,
  Sigmoid, LeakyRelu, HardSigmoid and Clip with constant bounds (onnxruntime's set).
- ``FuseConvAddActivation``: ``act(Add(Conv(x, W[, B]), z))`` (or a two-input ``Sum``, as
  Caffe2-converted ResNets write the residual) → ``FusedConv(x, W, B, z, activation=act)``, as
  onnxruntime's ConvAddActivationFusion: the residual add and the activation run in place on the
  convolution's fresh output instead of as two more nodes, each allocating and passing over a
  full feature map (16 Sum and 16 Relu nodes in ResNet-50).
- ``FuseConvAdd``: ``Add(Conv(x, W[, B]), z)`` with no activation after it → ``FusedConv(x, W,
  B, z)`` without one (onnxruntime reads that as the identity): MobileNetV2's residual adds.
- ``FuseBatchNormClamp``: ``act(BatchNormalization(x))`` (inference) with ``act`` a Relu or a Clip →
  a depthwise 1×1 ``FusedConv`` with the normalization's per-channel factors as its weights
  (DenseNet's normalization of the concatenated features, which no convolution precedes).
- ``FuseGemmActivation``: ``act(Gemm(A, B[, C]))`` → ``FusedGemm`` for the activations FusedGemm's
  ``activation_alpha/beta/gamma`` can carry (Relu, Tanh, Sigmoid, LeakyRelu, HardSigmoid, Elu,
  Selu, Softplus, Softsign, ThresholdedRelu).
- ``FuseMatMulScale`` / ``FuseMatMulTranspose``: MatMul (or FusedMatMul) scaled by a scalar
  constant, or reading an input through a Transpose of its last two axes → ``FusedMatMul`` with
  ``alpha`` / ``transA`` / ``transB``.  FusedMatMul has no activation: onnxruntime fuses scales
  and transposes into it, and so does this.

Only float32 is fused, as onnxruntime's CPU kernels for these ops are float32 only.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import pattern

from onnxplug_cpu.rule_values import FreshNames, constant_array, static_shape

from .. import DOMAIN
from . import BATCH_NORM_ACTIVATIONS, CONV_ACTIVATIONS

__all__ = ["fused_batch_norm_rules", "fused_conv_rules", "fused_gemm_rules", "fused_matmul_rules"]

_F32 = ir.DataType.FLOAT


def _params(node: ir.Node) -> list[float] | None:
    """An activation node's parameters as FusedConv's ``activation_params`` (``None``: not fusable)."""
    attrs = node.attributes
    if node.op_type in ("Relu", "Tanh", "Sigmoid"):
        return []
    if node.op_type == "LeakyRelu":
        return [attrs.get_float("alpha", 0.01)]
    if node.op_type == "HardSigmoid":
        return [attrs.get_float("alpha", 0.2), attrs.get_float("beta", 0.5)]
    if node.op_type == "Clip":
        if "min" in attrs or "max" in attrs:  # opset < 11 bounds
            return [
                attrs.get_float("min", float(np.finfo(np.float32).min)),
                attrs.get_float("max", float(np.finfo(np.float32).max)),
            ]
        bounds = []
        for i, default in ((1, np.finfo(np.float32).min), (2, np.finfo(np.float32).max)):
            value = node.inputs[i] if len(node.inputs) > i else None
            if value is None:
                bounds.append(float(default))
                continue
            array = constant_array(value)
            if array is None or array.size != 1:
                return None
            bounds.append(float(array.reshape(())))
        return bounds
    return None


class FuseConvActivation(pattern.RewriteRuleClassBase):
    def __init__(self, name: str, *, activation: str):
        super().__init__(name)
        self._activation = activation

    def pattern(self, op, x):
        conv = op.Conv(x, _allow_other_inputs=True, _outputs=["conv_out"])
        return getattr(op, self._activation)(conv, _allow_other_inputs=True, _outputs=["act_out"])

    def check(self, context, x, conv_out, act_out, **_):
        result = pattern.MatchResult()
        if x.dtype != _F32:
            return result.fail("FusedConv is fused for float32 only", x)
        self._activation_params = _params(act_out.producer())
        if self._activation_params is None:
            return result.fail("the activation's parameters are not constants", act_out)
        return result

    def rewrite(self, op, x, conv_out, **_):
        conv = conv_out.producer()
        attrs = dict(conv.attributes)
        attrs["activation"] = self._activation
        if self._activation_params:
            attrs["activation_params"] = self._activation_params
        return op.FusedConv(*conv.inputs, **attrs, _domain=DOMAIN)


class FuseConvQuickGelu(pattern.RewriteRuleClassBase):
    """``QuickGelu(Conv(x, W[, B]))`` (a SiLU after a convolution, as after every layer of a
    YOLO-style detector, once ``ms_ops.quick_gelu`` made the SiLU a QuickGelu) →
    ``FusedConv(activation="QuickGelu", activation_params=[alpha])``: onnxplug's own activation,
    which the CPU provider applies in its convolution tiles' store instead of a pass of its own.
    onnxruntime's FusedConv has no such activation, so a model saved after this rule runs on
    onnxplug only (as onnxruntime's own optimized models run on onnxruntime only)."""

    def pattern(self, op, x):
        conv = op.Conv(x, _allow_other_inputs=True, _outputs=["conv_out"])
        return op.QuickGelu(conv, _domain=DOMAIN, _outputs=["act_out"])

    def check(self, context, x, conv_out, act_out, **_):
        result = pattern.MatchResult()
        if x.dtype != _F32:
            return result.fail("FusedConv is fused for float32 only", x)
        return result

    def rewrite(self, op, x, conv_out, act_out, **_):
        conv = conv_out.producer()
        attrs = dict(conv.attributes)
        attrs["activation"] = "QuickGelu"
        attrs["activation_params"] = [act_out.producer().attributes.get_float("alpha", 1.0)]
        return op.FusedConv(*conv.inputs, **attrs, _domain=DOMAIN)


def _conv_add(op, x, z, add: str, conv_first: bool, **outputs):
    """The patterns' ``add(Conv(x, W[, B]), z)``, the Conv as the first or the second operand."""
    conv = op.Conv(x, _allow_other_inputs=True, _outputs=["conv_out"])
    operands = (conv, z) if conv_first else (z, conv)
    return getattr(op, add)(*operands, **outputs)


def _check_residual(result, x, z, conv_out):
    """``result``, failed unless ``x`` and ``z`` are float32 and ``z`` has the Conv output's known
    shape: FusedConv's Z has the output's shape (onnxruntime's kernel requires it), so a ``z``
    that broadcasts is left to the Add."""
    if x.dtype != _F32 or z.dtype != _F32:
        return result.fail("FusedConv is fused for float32 only", x)
    z_shape, y_shape = static_shape(z), static_shape(conv_out)
    if z_shape is None or z_shape != y_shape:
        return result.fail("the added tensor's shape is not known to equal the Conv output's", z)
    return result


def _fused_conv_with_residual(op, conv: ir.Node, z, attrs: dict):
    inputs = list(conv.inputs) + [None] * (3 - len(conv.inputs))  # X, W, B (maybe absent)
    return op.FusedConv(*inputs, z, **attrs, _domain=DOMAIN)


class FuseConvAddActivation(pattern.RewriteRuleClassBase):
    """``act(add(Conv(x, W[, B]), z))``; ``conv_first`` says which operand of ``add`` the Conv is."""

    def __init__(self, name: str, *, add: str, activation: str, conv_first: bool):
        super().__init__(name)
        self._add, self._activation, self._conv_first = add, activation, conv_first

    def pattern(self, op, x, z):
        total = _conv_add(op, x, z, self._add, self._conv_first)
        return getattr(op, self._activation)(total, _allow_other_inputs=True, _outputs=["act_out"])

    def check(self, context, x, z, conv_out, act_out, **_):
        result = _check_residual(pattern.MatchResult(), x, z, conv_out)
        if not result:
            return result
        self._activation_params = _params(act_out.producer())
        if self._activation_params is None:
            return result.fail("the activation's parameters are not constants", act_out)
        return result

    def rewrite(self, op, x, z, conv_out, **_):
        conv = conv_out.producer()
        attrs = dict(conv.attributes)
        attrs["activation"] = self._activation
        if self._activation_params:
            attrs["activation_params"] = self._activation_params
        return _fused_conv_with_residual(op, conv, z, attrs)


class FuseConvAdd(pattern.RewriteRuleClassBase):
    """``add(Conv(x, W[, B]), z)`` with no activation after it (MobileNetV2's inverted residuals,
    whose blocks end in a linear projection) → ``FusedConv(x, W, B, z)`` with no ``activation``:
    onnxruntime's FusedConv reads a missing activation as the identity, so a model saved after this
    rule still loads there.  The residual is then added in the convolution's store instead of a
    pass of its own.  An add whose only reader is an activation FusedConv carries is left to
    :class:`FuseConvAddActivation`, which fuses all three."""

    def __init__(self, name: str, *, add: str, conv_first: bool):
        super().__init__(name)
        self._add, self._conv_first = add, conv_first

    def pattern(self, op, x, z):
        return _conv_add(op, x, z, self._add, self._conv_first, _outputs=["total"])

    def check(self, context, x, z, conv_out, total, **_):
        result = _check_residual(pattern.MatchResult(), x, z, conv_out)
        if not result:
            return result
        readers = [use.node for use in total.uses()]
        fusable = len(readers) == 1 and readers[0].domain in ("", "ai.onnx") and _params(readers[0]) is not None
        if fusable and not total.is_graph_output():
            return result.fail("an activation follows: left to the Conv+Add+activation fusion", total)
        return result

    def rewrite(self, op, x, z, conv_out, **_):
        return _fused_conv_with_residual(op, conv_out.producer(), z, dict(conv_out.producer().attributes))


#: Gemm activations and their attribute → FusedGemm's activation_alpha/beta/gamma (with defaults).
_GEMM_ACTIVATIONS = {
    "Relu": {},
    "Tanh": {},
    "Sigmoid": {},
    "Softsign": {},
    "Softplus": {},
    "LeakyRelu": {"alpha": ("activation_alpha", 0.01)},
    "HardSigmoid": {"alpha": ("activation_alpha", 0.2), "beta": ("activation_beta", 0.5)},
    "Elu": {"alpha": ("activation_alpha", 1.0)},
    "Selu": {"alpha": ("activation_alpha", 1.6732632423543772), "gamma": ("activation_gamma", 1.0507009873554805)},
    "ThresholdedRelu": {"alpha": ("activation_alpha", 1.0)},
}


class FuseGemmActivation(pattern.RewriteRuleClassBase):
    def __init__(self, name: str, *, activation: str):
        super().__init__(name)
        self._activation = activation

    def pattern(self, op, a):
        gemm = op.Gemm(a, _allow_other_inputs=True, _outputs=["gemm_out"])
        return getattr(op, self._activation)(gemm, _outputs=["act_out"])

    def check(self, context, a, **_):
        result = pattern.MatchResult()
        if a.dtype != _F32:
            return result.fail("FusedGemm is fused for float32 only", a)
        return result

    def rewrite(self, op, a, gemm_out, act_out, **_):
        gemm, act = gemm_out.producer(), act_out.producer()
        attrs = {
            "alpha": gemm.attributes.get_float("alpha", 1.0),
            "beta": gemm.attributes.get_float("beta", 1.0),
            "transA": gemm.attributes.get_int("transA", 0),
            "transB": gemm.attributes.get_int("transB", 0),
            "activation": self._activation,
        }
        for name, (target, default) in _GEMM_ACTIVATIONS[self._activation].items():
            attrs[target] = act.attributes.get_float(name, default)
        return op.FusedGemm(*gemm.inputs, **attrs, _domain=DOMAIN)


def _scalar(value: ir.Value) -> float | None:
    array = constant_array(value)
    if array is None or array.size != 1 or array.ndim > 1 or array.dtype != np.float32:
        return None
    return float(array.reshape(()))


def _matmul_attrs(node: ir.Node) -> dict:
    """A MatMul's or FusedMatMul's attributes as FusedMatMul ones."""
    get = node.attributes
    return {
        "alpha": get.get_float("alpha", 1.0),
        "transA": get.get_int("transA", 0),
        "transB": get.get_int("transB", 0),
        "transBatchA": get.get_int("transBatchA", 0),
        "transBatchB": get.get_int("transBatchB", 0),
    }


class FuseMatMulScale(pattern.RewriteRuleClassBase):
    """``MatMul(a, b) * c``, ``c * MatMul(a, b)`` or ``MatMul(a, b) / c`` for a scalar constant ``c``."""

    def __init__(self, name: str, *, form: str, fused_input: bool):
        super().__init__(name)
        self._form = form
        self._fused_input = fused_input

    def pattern(self, op, a, b, c):
        if self._fused_input:
            mm = op.FusedMatMul(a, b, _domain=DOMAIN, _outputs=["mm"])
        else:
            mm = op.MatMul(a, b, _outputs=["mm"])
        if self._form == "div":
            return op.Div(mm, c)
        return op.Mul(c, mm) if self._form == "mul_first" else op.Mul(mm, c)

    def check(self, context, a, b, c, **_):
        result = pattern.MatchResult()
        if a.dtype != _F32:
            return result.fail("FusedMatMul is fused for float32 only", a)
        scalar = _scalar(c)
        if scalar is None or (self._form == "div" and scalar == 0.0):
            return result.fail("the scale is not a float32 scalar constant", c)
        a_shape, b_shape = static_shape(a), static_shape(b)
        if a_shape is None or b_shape is None or (len(a_shape) < 2 and len(b_shape) < 2):
            return result.fail("a scalar scale of a 1-D x 1-D MatMul would change its rank", c)
        self._factor = 1.0 / scalar if self._form == "div" else scalar
        return result

    def rewrite(self, op, a, b, mm, **_):
        attrs = _matmul_attrs(mm.producer())
        attrs["alpha"] = attrs["alpha"] * self._factor
        return op.FusedMatMul(a, b, **attrs, _domain=DOMAIN)


def _swaps_last_two(node: ir.Node, rank: int) -> bool:
    perm = node.attributes.get_ints("perm", None)
    if rank < 2 or perm is None or len(perm) != rank:
        return False
    return list(perm) == [*range(rank - 2), rank - 1, rank - 2]


class FuseMatMulTranspose(pattern.RewriteRuleClassBase):
    """``MatMul(Transpose(a), b)`` / ``MatMul(a, Transpose(b))`` where the Transpose swaps the
    last two axes (and the other operand has rank ≥ 2) → ``FusedMatMul(transA / transB)``."""

    def __init__(self, name: str, *, side: str):
        super().__init__(name)
        self._side = side

    def pattern(self, op, a, b):
        if self._side == "a":
            return op.MatMul(op.Transpose(a, _outputs=["transposed"]), b)
        return op.MatMul(a, op.Transpose(b, _outputs=["transposed"]))

    def check(self, context, a, b, transposed, **_):
        result = pattern.MatchResult()
        if a.dtype != _F32:
            return result.fail("FusedMatMul is fused for float32 only", a)
        source = a if self._side == "a" else b
        shape, other = static_shape(source), static_shape(b if self._side == "a" else a)
        if shape is None or other is None or len(other) < 2:
            return result.fail("the operands' ranks are unknown or below 2", source)
        if not _swaps_last_two(transposed.producer(), len(shape)):
            return result.fail("the Transpose does not swap just the last two axes", transposed)
        return result

    def rewrite(self, op, a, b, **_):
        flag = "transA" if self._side == "a" else "transB"
        return op.FusedMatMul(a, b, **{flag: 1}, _domain=DOMAIN)


def fused_matmul_rules() -> list:
    return [FuseMatMulTranspose.rule(f"matmul_transpose_{s}", side=s) for s in ("a", "b")] + [
        FuseMatMulScale.rule(f"matmul_scale_{form}{'_fused' if fused else ''}", form=form, fused_input=fused)
        for fused in (True, False)
        for form in ("div", "mul_first", "mul_last")
    ]


def fused_conv_rules() -> list:
    return (
        [
            FuseConvAddActivation.rule(f"conv_{add.lower()}_{a}_{i}", add=add, activation=a, conv_first=first)
            for add in ("Add", "Sum")
            for a in CONV_ACTIVATIONS
            for i, first in enumerate((True, False))
        ]
        + [FuseConvActivation.rule(f"conv_{a}", activation=a) for a in CONV_ACTIVATIONS]
        + [FuseConvQuickGelu.rule("conv_quick_gelu")]
        + [
            FuseConvAdd.rule(f"conv_{add.lower()}_{i}", add=add, conv_first=first)
            for add in ("Add", "Sum")
            for i, first in enumerate((True, False))
        ]
    )


class FuseBatchNormClamp(pattern.RewriteRuleClassBase):
    """``act(BatchNormalization(x, scale, bias, mean, var))`` (inference, constant parameters, a
    float32 NCHW ``x`` whose channels are known) with ``act`` a Relu or a Clip with constant
    bounds → ``FusedConv(x, W, B, group=C, kernel_shape=[1, 1], activation=act)``: a depthwise 1×1
    convolution whose weights are the normalization's per-channel factors, ``a = scale /
    sqrt(var + ε)`` and ``B = bias − mean · a``, worked out in float32 as the BatchNormalization
    kernel does.  DenseNet normalizes and rectifies the concatenated features before each of its
    58 dense layers, where no convolution precedes to fold them into: as one FusedConv the CPU
    provider makes one pass over the features (multiply, add, clamp) instead of two.
    onnxruntime's FusedConv runs the same node (a grouped convolution)."""

    def __init__(self, name: str, *, activation: str):
        super().__init__(name)
        self._fresh_names = FreshNames()
        self._activation = activation

    def pattern(self, op, x, scale, bias, mean, var):
        bn = op.BatchNormalization(x, scale, bias, mean, var, _outputs=["bn_out"])
        return getattr(op, self._activation)(bn, _allow_other_inputs=True, _outputs=["act_out"])

    def check(self, context, x, scale, bias, mean, var, bn_out, act_out, **_):
        result = pattern.MatchResult()
        if x.dtype != _F32:
            return result.fail("FusedConv is fused for float32 only", x)
        shape = static_shape(x)
        if shape is None or len(shape) != 4:
            return result.fail("the normalized tensor is not a 4-D tensor of known shape", x)
        bn = bn_out.producer()
        attrs = bn.attributes
        modes = (attrs.get_int("training_mode", 0), attrs.get_int("spatial", 1), attrs.get_int("is_test", 1))
        if modes != (0, 1, 1):
            return result.fail("BatchNormalization is not spatial inference normalization")
        arrays = [constant_array(v) for v in (scale, bias, mean, var)]
        if any(a is None or a.dtype != np.float32 or a.shape != (shape[1],) for a in arrays):
            return result.fail("BatchNormalization's parameters are not constant float32 vectors of its channels")
        self._activation_params = _params(act_out.producer())
        if self._activation_params is None:
            return result.fail("the activation's parameters are not constants", act_out)
        self._arrays, self._epsilon = arrays, np.float32(attrs.get_float("epsilon", 1e-5))
        base = bn.name or "batch_norm"
        self._names = self._fresh_names(context.graph_or_function, f"{base}_factors", f"{base}_shifts")
        return result

    def rewrite(self, op, x, **_):
        scale, bias, mean, var = self._arrays
        factors = scale / np.sqrt(var + self._epsilon)  # float32, as kernels.normalization computes
        shifts = bias - mean * factors
        channels = factors.shape[0]
        w = op.initializer(ir.Tensor(factors.reshape(channels, 1, 1, 1), name=self._names[0]))
        b = op.initializer(ir.Tensor(shifts, name=self._names[1]))
        attrs = dict(group=channels, kernel_shape=[1, 1], activation=self._activation)
        if self._activation_params:
            attrs["activation_params"] = self._activation_params
        return op.FusedConv(x, w, b, **attrs, _domain=DOMAIN)


def fused_batch_norm_rules() -> list:
    return [FuseBatchNormClamp.rule(f"batch_norm_{a}", activation=a) for a in BATCH_NORM_ACTIVATIONS]


def fused_gemm_rules() -> list:
    return [FuseGemmActivation.rule(f"gemm_{a}", activation=a) for a in _GEMM_ACTIVATIONS]

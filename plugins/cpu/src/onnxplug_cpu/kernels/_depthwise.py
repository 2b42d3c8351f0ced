"""Depthwise 2-D convolution (``group == C``, one filter per channel) as shifted multiply-adds.

Why: as a grouped im2col the work is C matrix-vector products over a 9× copied input, which BLAS
runs far below its matmul speed and which moves ten times the input through memory.  Here each
kernel offset is one broadcast multiply-add of a strided view of the padded input into the
output, on blocks small enough that the block's accumulator and temporary stay in cache across
the k×k passes.  Wide layers (many channels, usually small maps) are computed channels-last: the
padding copy also transposes, each pass then runs over ``W·C`` contiguous cells instead of rows
of a few cells with a per-channel scalar, and one copy transposes back.
"""

from __future__ import annotations

import numpy as np

from . import _channel_jit, _depthwise_jit
from ._conv_bindings import depthwise_binding
from ._jit import direct_call
from ._team import join_run, run_settings

__all__ = ["BoundChannelAffine", "BoundDepthwise", "depthwise_conv", "depthwise_conv_numpy", "plan_depthwise"]

#: Output cells per block: accumulator + temporary of this size stay in L2.
_BLOCK_CELLS = 16384
_BLOCK_CELLS_LAST = 65536
#: Channels per thread below which one thread computes a compiled layer alone.
_MIN_CHANNELS_PER_PART = 8
#: From this many channels the channels-last layout is faster (measured on MobileNetV2's layers).
_CHANNELS_LAST_FROM = 64


def depthwise_conv(x, w, begin, end, out, strides, dilations, bias=None, clamp=None):
    """``x`` ``(N, C, H, W)`` float32/float64 convolved per channel with ``w`` ``(C, kh, kw)``,
    padded by ``begin``/``end``, plus ``bias`` ``(C,)``, clamped to ``clamp`` ``(low, high)``;
    returns ``(N, C, *out)``.  The compiled kernels add the bias and clamp in their one store."""
    bound = plan_depthwise(x, w, begin, end, out, strides, dilations)
    if bound is not None:
        return bound(x, bias, clamp)
    return depthwise_conv_numpy(x, w, begin, end, out, strides, dilations, bias, clamp)


def plan_depthwise(x, w, begin, end, out, strides, dilations) -> BoundDepthwise | BoundChannelAffine | None:
    """The compiled layer (:class:`BoundDepthwise`) for ``x``'s shape, a float32 1×1 layer at
    stride 1 without padding as :class:`BoundChannelAffine`, or ``None`` where the numpy passes
    run it (another kernel than 3×3, a dilation, a stride other than 1 or 2 on both axes, or no
    numba)."""
    if w.shape[1:] == (1, 1) and tuple(strides) == (1, 1) and not any(begin) and not any(end):
        if x.dtype == np.float32 and x.ndim == 4:
            return BoundChannelAffine(x.shape, w)
    kernels = _depthwise_jit.compiled() if w.shape[1:] == (3, 3) and tuple(dilations) == (1, 1) else None
    stride = strides[0] if strides[0] == strides[1] else 0
    if kernels is None or stride not in (1, 2):
        return None
    return BoundDepthwise(x.shape, x.dtype, w, begin, end, out, stride)


def depthwise_conv_numpy(x, w, begin, end, out, strides, dilations, bias=None, clamp=None):
    """:func:`depthwise_conv` with numpy passes only (any kernel, stride, dilation); the bias
    and the clamp are one more pass each."""
    if x.shape[1] >= _CHANNELS_LAST_FROM:
        y = _channels_last(x, w, begin, end, out, strides, dilations)
    else:
        y = _channels_first(x, w, begin, end, out, strides, dilations)
    if bias is not None:
        y += bias.astype(y.dtype, copy=False).reshape(1, -1, 1, 1)
    if clamp is not None:
        np.clip(y, y.dtype.type(clamp[0]), y.dtype.type(clamp[1]), out=y)
    return y


def _channels_first(x, w, begin, end, out, strides, dilations):
    n, c, h, wd = x.shape
    kh, kw = w.shape[1:]
    if any(begin) or any(end):
        padded = np.zeros((n, c, h + begin[0] + end[0], wd + begin[1] + end[1]), dtype=x.dtype)
        padded[:, :, begin[0] : begin[0] + h, begin[1] : begin[1] + wd] = x
    else:
        padded = x
    oh, ow = out
    sh, sw = strides
    dh, dw = dilations
    y = np.empty((n, c, oh, ow), dtype=x.dtype)
    block = max(1, _BLOCK_CELLS // max(1, n * oh * ow))
    tmp = np.empty((n, min(block, c), oh, ow), dtype=x.dtype)
    taps = w.reshape(c, kh * kw, 1, 1)
    for c0 in range(0, c, block):
        c1 = min(c, c0 + block)
        acc, scratch = y[:, c0:c1], tmp[:, : c1 - c0]
        for index in range(kh * kw):
            i, j = divmod(index, kw)
            view = padded[:, c0:c1, i * dh : i * dh + (oh - 1) * sh + 1 : sh, j * dw : j * dw + (ow - 1) * sw + 1 : sw]
            if index == 0:
                np.multiply(view, taps[c0:c1, 0], out=acc)
            else:
                np.multiply(view, taps[c0:c1, index], out=scratch)
                acc += scratch
    return y


def _channels_last(x, w, begin, end, out, strides, dilations):
    n, c, h, wd = x.shape
    kh, kw = w.shape[1:]
    padded = np.zeros((n, h + begin[0] + end[0], wd + begin[1] + end[1], c), dtype=x.dtype)
    padded[:, begin[0] : begin[0] + h, begin[1] : begin[1] + wd, :] = x.transpose(0, 2, 3, 1)
    oh, ow = out
    sh, sw = strides
    dh, dw = dilations
    acc = np.empty((n, oh, ow, c), dtype=x.dtype)
    rows = max(1, _BLOCK_CELLS_LAST // max(1, n * ow * c))
    tmp = np.empty((n, min(rows, oh), ow, c), dtype=x.dtype)
    taps = np.ascontiguousarray(w.reshape(c, kh * kw).T)  # (K, C): one contiguous vector per offset
    for r0 in range(0, oh, rows):
        r1 = min(oh, r0 + rows)
        block, scratch = acc[:, r0:r1], tmp[:, : r1 - r0]
        for index in range(kh * kw):
            i, j = divmod(index, kw)
            top = r0 * sh + i * dh
            view = padded[:, top : top + (r1 - r0 - 1) * sh + 1 : sh, j * dw : j * dw + (ow - 1) * sw + 1 : sw]
            if index == 0:
                np.multiply(view, taps[0], out=block)
            else:
                np.multiply(view, taps[index], out=scratch)
                block += scratch
    return np.ascontiguousarray(acc.transpose(0, 3, 1, 2))


class BoundDepthwise:
    """A compiled 3×3 depthwise layer for one input shape and one node's filters: what the kernel
    takes that does not change from call to call, worked out once, so that a node that keeps it
    (``numerics.PackedConv.remember``) pays a few µs of Python a call instead of the routing's
    ~15 (a MobileNetV2 has 17 such layers).  Called as ``bound(x, bias, clamp)``.

    On the calling thread alone outside numba's team: split over two threads there, MobileNetV2
    and ShuffleNetV2 measured slower (11.2 against 10.6 ms, 6.8 against 6.6, alternating in one
    process), because OpenBLAS's worker is still polling from the previous layer's product and
    holds the second core.  Where the convolutions run on numba's team (``kernels._f32_conv``)
    there is no OpenBLAS worker, and one image's channels are split over that team."""

    __slots__ = (
        "shape",
        "dtype",
        "out_shape",
        "_planes",
        "_cells",
        "_taps",
        "_no_bias",
        "_form",
        "_masks",
        "_top_left",
        "_last",
    )

    def __init__(self, shape: tuple, dtype, w: np.ndarray, begin, end, out, stride: int) -> None:
        n, c, h, wd = shape
        oh, ow = out
        # The padding must cover every window, as the numpy path's padded copy does.
        if h + begin[0] + end[0] < (oh - 1) * stride + 3 or wd + begin[1] + end[1] < (ow - 1) * stride + 3:
            raise ValueError(f"depthwise: padded input {shape} {begin} {end} is smaller than output {out} needs")
        self.shape, self.dtype = shape, np.dtype(dtype)
        self.out_shape = (n, c, oh, ow)
        self._planes, self._cells = (n * c, h, wd), (n * c, oh, ow)
        self._taps = np.ascontiguousarray(w.reshape(c, 9))
        self._no_bias = np.zeros(c, dtype=dtype)
        # Padding 1 all round at stride 1 (the common 3×3 layer): each plane as one flat run,
        # which vectorises where a narrow map's rows did not (384 channels at 14×14: 68 against
        # 103 µs).
        form = stride
        if tuple(begin) == (1, 1) and stride == 1 and (oh, ow) == (h, wd):
            form = "flat"
        elif tuple(begin) == (1, 1) and stride == 2 and (oh, ow) == ((h - 1) // 2 + 1, (wd - 1) // 2 + 1):
            form = "phases"  # PyTorch's padding=1: each plane's four phases, then one flat run
        self._masks = None
        if form in ("flat", "phases") and self.dtype == np.float32 and _depthwise_jit.fused_planes():
            # fused multiply-adds of masked loads, straight from the input (kernels._depthwise_ir)
            form = f"{form}_fma"
            if form == "flat_fma":
                from ._simd_ir import flat_masks

                self._masks = flat_masks(h, wd)
        self._form = form
        self._top_left = (int(begin[0]), int(begin[1]))
        # (bias, clamp, the kernel's arguments between the planes and the output) of the last
        # call: a node passes the same objects each call (see kernels._f32_conv.BoundLayer)
        self._last: tuple | None = None

    def __call__(self, x: np.ndarray, bias=None, clamp=None, settings=None) -> np.ndarray:
        """The layer of ``x`` (this shape and dtype) plus ``bias`` ``(C,)``, clamped to ``clamp``
        ``(low, high)``, as a fresh array; ``settings``: the run's, where the caller has read them."""
        last = self._last
        if last is not None and last[0] is bias and last[1] is clamp:
            arguments = last[2]
        else:
            arguments = self._arguments(bias, clamp)
        planes = np.ascontiguousarray(x).reshape(self._planes)
        y = np.empty(self.out_shape, dtype=self.dtype)
        n, c = self.shape[:2]
        if settings is None:
            settings = run_settings()
        parts = min(settings.budget, c // _MIN_CHANNELS_PER_PART) if n == 1 else 1
        if parts > 1 and settings.tiles and settings.team:  # (team_runs_convolutions)
            join_run()
            _depthwise_jit.compiled_parallel()[self._form](planes, *arguments, y.reshape(self._cells), parts)
        else:
            _depthwise_jit.compiled()[self._form](planes, *arguments, y.reshape(self._cells))
        return y

    def again(self, x, bias, residual, clamp, silu, settings, out) -> np.ndarray | None:
        """The layer, where the last call passed these ``bias`` and ``clamp`` objects and there is
        no residual or SiLU (which this layer does not take), else ``None``: ``_f32_conv.BoundLayer.again``'s
        form, which ``numerics.Convolution`` tries first for the input shape it saw last (``out``
        is not used: this layer returns its own array)."""
        last = self._last
        if last is None or last[0] is not bias or last[1] is not clamp or residual is not None or silu is not None:
            return None
        return self(x, bias, clamp, settings)

    def bind(self, x, bias, clamp, output, scratch):
        """This layer as an ``onnxplug.kernels.Binding`` over ``output``
        (``kernels._conv_bindings``), or ``None`` for a bias it would convert (a copy would not
        follow the array's values); ``scratch`` is not needed."""
        if bias is not None and not (bias.dtype == self.dtype and bias.ndim == 1 and bias.flags.c_contiguous):
            return None
        arguments = self._arguments(bias, clamp)
        settings = run_settings()
        n, c = self.shape[:2]
        parts = min(settings.budget, c // _MIN_CHANNELS_PER_PART) if n == 1 else 1
        if parts > 1 and settings.tiles and settings.team:
            kernel = direct_call(_depthwise_jit.compiled_parallel()[self._form])
            return depthwise_binding(kernel, self._planes, arguments, self._cells, x, output, parts)
        kernel = direct_call(_depthwise_jit.compiled()[self._form])
        return depthwise_binding(kernel, self._planes, arguments, self._cells, x, output, None)

    def _arguments(self, bias, clamp) -> tuple:
        kind = self.dtype.type
        if bias is None:
            b = self._no_bias
        elif bias.dtype == self.dtype and bias.ndim == 1 and bias.flags.c_contiguous:
            b = bias
        else:
            b = np.ascontiguousarray(bias.reshape(self.shape[1]), dtype=self.dtype)
        low, high = (-np.inf, np.inf) if clamp is None else clamp
        arguments = (self._taps, b, bias is not None, kind(low), kind(high))
        if self._form == "flat_fma":
            arguments += (self._masks,)
        elif self._form != "phases_fma":
            arguments += self._top_left
        if b is bias or bias is None:  # (a converted copy would not follow the array's values)
            self._last = (bias, clamp, arguments)
        return arguments


class BoundChannelAffine:
    """A float32 depthwise 1×1 convolution at stride 1 without padding (``x · w[c] + b[c]``, then
    clamped): a BatchNormalization and its Relu or Clip, as ``onnxplug_ms_ops``' FusedConv rule
    writes them, in one compiled pass over the features (``kernels._channel_jit``), where the
    numpy passes made one for the product, one for the bias and one for the clamp.  The same
    bits as those passes: the product rounded, then the bias added, then clamped.  Called as
    :class:`BoundDepthwise` is."""

    __slots__ = ("shape", "out_shape", "_factors")

    def __init__(self, shape: tuple, w: np.ndarray) -> None:
        self.shape = self.out_shape = shape
        self._factors = np.ascontiguousarray(w.reshape(-1), dtype=np.float32)

    def __call__(self, x: np.ndarray, bias=None, clamp=None) -> np.ndarray:
        low, high = (-np.inf, np.inf) if clamp is None else clamp
        low, high = np.float32(low), np.float32(high)
        if bias is not None:
            y = _channel_jit.affine_channels(np.ascontiguousarray(x), self._factors, bias, low, high)
            if y is not None:
                return y
        # (without a bias nothing is added: adding a zero would turn -0.0 into +0.0)
        y = x * self._factors.reshape(-1, 1, 1)
        if bias is not None:
            y += np.asarray(bias, dtype=np.float32).reshape(-1, 1, 1)
        if clamp is not None:
            np.clip(y, low, high, out=y)
        return y

    def bind(self, x, bias, clamp, output, scratch):
        """This pass as an ``onnxplug.kernels.Binding`` over ``output`` (``kernels._channel_jit``),
        or ``None`` without a bias (the numpy passes add none) or where the compiled pass does not
        apply; ``scratch`` is not needed."""
        if bias is None or bias.dtype != np.float32 or bias.ndim != 1:
            return None
        low, high = (-np.inf, np.inf) if clamp is None else clamp
        return _channel_jit.affine_binding(x, self._factors, bias, low, high, output)

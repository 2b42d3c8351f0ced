"""Public numeric helpers of the CPU provider, for op libraries built on it (``onnxplug_ms_ops``).

These are the CPU kernels' own building blocks, so a contrib op such as ``FusedConv`` computes a
convolution, a window geometry or an erf exactly as the provider's ``Conv`` and ``Erf`` do
(one implementation to fix and to speed up).  Everything here is part of the distribution's
public surface: other packages import from ``onnxplug_cpu.numerics``, never from the private
``kernels._*`` modules.

* :func:`erf`: the error function (numpy has none): double precision for float64, else single.
* :func:`gelu_single`: exact Gelu in float32 of ``x`` or ``x + bias``, accurate in the negative
  tail (the fast path of ``Gelu`` and com.microsoft's Gelu family; one compiled pass with numba).
* :func:`gelu_tanh_single`: Gelu's tanh approximation in float32 (FastGelu), one compiled pass.
* :func:`layer_norm_last_axis`: float32 layer normalisation over the last axis in one compiled
  loop per row, with its mean and inverse deviation (``None`` where it does not apply);
  :func:`skip_layer_norm_last_axis`: the same of ``x + skip (+ bias)``, the sum in the same pass.
* :func:`softmax_last_axis`: float32 softmax over the last axis in one compiled loop per row
  (``None`` where it does not apply); :func:`attention_heads`: attention's heads by blocks of queries.
* :func:`sigmoid`, :func:`silu`: the logistic function and ``x * sigmoid(alpha * x)``, float32
  in one compiled pass (``kernels._sigmoid_jit``), other types with numpy.
* :func:`widen`, :func:`is_float`: narrow floats (float16, bfloat16, float8) are computed in float32.
* :class:`Gemm`: one node's ``alpha · op(A) · op(B) + beta · C`` as the provider's ``Gemm``
  computes it (a constant float32 ``B`` on the tiles, prepared once; one row times a transposed
  ``B`` split over the run's team; numpy's product otherwise).
* :func:`pool_geometry`, :func:`windows`: output sizes and pads of a sliding window
  (auto_pad, pads, strides, dilations, ceil_mode) and the strided window view of the padded input.
* :func:`pack_conv_weights`, :class:`PackedConv`, :func:`convolve`, :class:`Convolution` (one
  node's, with its compiled layers kept per input shape): N-d grouped convolution
  (ONNX ``Conv``).  The general path is im2col over the window view and one batched matmul for all
  groups; pointwise convolutions are one matmul on the input buffer, depthwise ones shifted
  multiply-adds (``kernels._depthwise``; 3×3 with stride 1 or 2 numba loops,
  ``kernels._depthwise_jit``), large float32 3×3 stride-1 ones Winograd F(4×4) or F(2×2)
  (``kernels._winograd``), and stride-1 ones with no more outputs than inputs one matmul then
  shifted adds (``kernels._shifted``; float32 adds, crop and bias in one compiled pass,
  ``kernels._shifted_jit``), with filters prepared once in :class:`PackedConv`.  Where numba
  and AVX-512F are present (and ``ONNXPLUG_CPU_CONV_TILE`` is not ``0``), float32 2-D
  convolutions other than depthwise layers and non-overlapping patches run on compiled tiles
  instead (``kernels._f32_conv``), except the wide 3×3 layers Winograd still wins and the
  layers the row tiles take (``kernels._row_conv``: channels in the lanes, the padding's taps
  skipped, strided layers read in place; kernels of up to 5×5 and strided pointwise ones, of at
  least 32 output and 16 input channels).
"""

from __future__ import annotations

import math

import numpy as np

from onnxplug.errors import Fail, InvalidArgument

from .kernels import _depthwise, _f32_conv, _f32_matmul, _f32_products, _row_conv
from .kernels._epilogue import finish
from .kernels._f32_attention import attend_merged as attention_heads
from .kernels._jit import load_for_feature_maps
from .kernels._layernorm_jit import layer_norm_last_axis, skip_layer_norm_last_axis
from .kernels._numeric import erf, gelu_single, gelu_tanh_single, is_float, widen
from .kernels._shifted import shifted_conv, stacked_filters
from .kernels._sigmoid_jit import logistic, silu
from .kernels._softmax_jit import softmax_last_axis
from .kernels._team import run_settings
from .kernels._winograd import winograd_conv, winograd_weights
from .kernels.math import Gemm
from .kernels.pool import pool_geometry, windows
from .kernels.rnn import rnn_activations

__all__ = [
    "attention_heads",
    "Convolution",
    "Gemm",
    "PackedConv",
    "batched_matmul",
    "gelu_single",
    "gelu_tanh_single",
    "rnn_activations",
    "softmax_last_axis",
    "conv_compute_dtype",
    "convolve",
    "erf",
    "is_float",
    "layer_norm_last_axis",
    "pack_conv_weights",
    "pool_geometry",
    "sigmoid",
    "silu",
    "skip_layer_norm_last_axis",
    "widen",
    "windows",
]


def sigmoid(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``1 / (1 + exp(-x))`` of a float array, into ``out`` when given (``x`` itself allowed).
    Where ``exp`` overflows the result is an exact 0 (onnxruntime's too)."""
    y = logistic(x, None, out)
    if y is not None:
        return y
    e = np.negative(x, out=out)
    with np.errstate(over="ignore"):
        np.exp(e, out=e)
    e += 1
    return np.divide(1, e, out=e)  # a true division: numpy's reciprocal is not vectorised


def conv_compute_dtype(dtype: np.dtype) -> type:
    """float64 stays float64; every other input type is convolved in float32."""
    return np.float64 if dtype == np.float64 else np.float32


def pack_conv_weights(w: np.ndarray, group: int, op: str = "Conv") -> np.ndarray:
    """``(M, C/g, *k)`` weights as ``(g, M/g, C/g*K)`` for :func:`convolve` (done once per node
    when the weights are constant).

    :raises InvalidArgument: ``M`` cannot be split into ``group`` groups.
    """
    m = w.shape[0]
    if group <= 0 or m % group:
        raise InvalidArgument(f"{op}: {m} output channels cannot be split into group={group}")
    # A view of float32 weights when they are contiguous: the constant is not held twice.
    w = w.astype(conv_compute_dtype(w.dtype), copy=False)
    return np.ascontiguousarray(w.reshape(group, m // group, math.prod(w.shape[1:])))


#: Winograd pays from this many input channels (im2col copies the input 9×, Winograd 2.25×)
WINOGRAD_MIN_CHANNELS = 24
#: ... and this many output channels (measured on the cnn bench family's layers) ...
WINOGRAD_MIN_MAPS = 8
#: ... and at most this many times as many outputs as inputs (SqueezeNet's 4× expand layers
#: measured slower: the output transform over M channels outweighs the saving on a thin input).
WINOGRAD_MAX_WIDENING = 2
#: ... and the layer has at least this many output tiles (fewer make the α² matmuls too thin).
WINOGRAD_MIN_TILES = 36
#: Layers with as many outputs as inputs are shifted only on maps of at least this many cells.
SHIFTED_MIN_CELLS = 196
#: F(2×2) is used on small maps (too few F(4×4) tiles) only for layers at least this wide.
WINOGRAD_F2_MIN_CHANNELS = 128


def batched_matmul(
    a: np.ndarray, b: np.ndarray, *, a_shift: np.ndarray | None = None, b_shift: np.ndarray | None = None
) -> np.ndarray:
    """``np.matmul(a + a_shift, b + b_shift)`` (a shift ``None``: nothing added); float32 ``a``
    ``(..., M, K)`` and ``b`` ``(..., K, N)`` with the same leading dimensions (attention's
    per-head products) run on the AVX-512 tiles split over the run's threads where they are
    available (``kernels._f32_matmul.batched``), else numpy's.  Not numpy's bits there: each sum
    runs over ``k`` in order with one rounding per multiply-add.  A shift broadcasts to its
    operand with a 1 in one of the last two axes (attention's biases per head and feature: its
    operand's copy for the tiles adds it, instead of a numpy pass of its own)."""
    product = _f32_matmul.batched(a, b, a_shift, b_shift)
    if product is not None:
        return product
    return np.matmul(a if a_shift is None else a + a_shift, b if b_shift is None else b + b_shift)


class PackedConv:
    """Constant ``(M, C/g, *k)`` Conv weights prepared once per node (at session creation).

    :ivar matrix: :func:`pack_conv_weights` of the weights (the im2col and pointwise paths).
    :ivar depthwise: ``(C, *k)`` filters when every group has one input and one output channel.
    :ivar shiftable: ungrouped 2-D weights with ``M <= C`` and a kernel larger than 1×1, which
        may take the shifted path with ``(k·M, C)`` :meth:`stacked_filters`.
    :ivar uses_winograd: 3×3 ungrouped float32 weights of a shape Winograd pays for. Their
        F(4×4) or F(2×2) filters are computed on the first call that takes that tile (the tile
        depends on the map: ResNet-50's 7×7 layers at batch 1 take neither) and kept in
        :attr:`winograd`; made eagerly, unused F(4×4) filters held 4× those layers' weights.
    ``winograd=False`` keeps to the paths that only multiply and add the given weights (the
    exact integer convolutions: Winograd's transforms have fractional coefficients).
    """

    def __init__(self, w: np.ndarray, group: int, op: str = "Conv", *, winograd: bool = True) -> None:
        self.matrix = pack_conv_weights(w, group, op)
        if self.matrix.dtype == np.float32 and w.ndim == 4:
            load_for_feature_maps()  # the epilogue, shifted adds and pools compiled (kernels._jit)
        self.group = group
        self.depthwise = None
        if w.ndim == 4 and group > 1 and w.shape[0] == group and w.shape[1] == 1:
            self.depthwise = np.ascontiguousarray(self.matrix.reshape((group,) + w.shape[2:]))
        # Stride-1 layers that do not widen multiply first and shift after (kernels._shifted);
        # the stacked filters are made here when the layer narrows (always shifted), else on
        # the first call that shifts (most such layers take Winograd).
        self.shiftable = w.ndim == 4 and group == 1 and w.shape[0] <= w.shape[1] and w.shape[2:] != (1, 1)
        self._shape = w.shape
        self._stacked = None
        self._rows = None
        self._bound: dict[tuple, tuple] = {}
        if self.shiftable and 2 * w.shape[0] <= w.shape[1] and not _f32_conv.available():
            self.stacked_filters()  # not with the compiled tiles, which take these layers
        self.winograd: dict[int, np.ndarray] = {}
        self.uses_winograd = bool(
            winograd
            and group == 1
            and w.shape[2:] == (3, 3)
            and self.matrix.dtype == np.float32
            and w.shape[1] >= WINOGRAD_MIN_CHANNELS
            and WINOGRAD_MIN_MAPS <= w.shape[0] <= WINOGRAD_MAX_WIDENING * w.shape[1]
        )
        self._w = w if self.uses_winograd else None

    def remember(self, shape: tuple, attributes: tuple, bound) -> None:
        """Keep the compiled layer :func:`convolve` made with these weights for inputs of
        ``shape`` with these attributes (the node's own, passed on every call): the tiles'
        ``BoundLayer`` or a ``BoundDepthwise``, so that the next call skips the checks and the
        routing (a small layer's Python: ~8 → ~3 µs)."""
        if len(self._bound) >= _REMEMBERED_SHAPES and shape not in self._bound:
            try:  # the oldest: a node fed ever new shapes stays bounded
                self._bound.pop(next(iter(self._bound)), None)
            except (RuntimeError, StopIteration):  # a concurrent run changed the dict meanwhile
                pass
        self._bound[shape] = (attributes, bound)

    def remembered(self, shape: tuple, attributes: tuple):
        """What :meth:`remember` kept for ``shape``, if it was kept with equal attributes, else
        ``None``.  (The node passes the same objects each call, so the comparison is one identity
        test per attribute.)"""
        kept = self._bound.get(shape)
        if kept is None or kept[0] != attributes:
            return None
        return kept[1]

    def stacked_filters(self) -> np.ndarray:
        if self._stacked is None:  # idempotent, as winograd_filters
            self._stacked = stacked_filters(self.matrix.reshape(self._shape))
        return self._stacked

    def winograd_filters(self, m: int) -> np.ndarray:
        if m not in self.winograd:  # idempotent: a concurrent first call computes the same array
            self.winograd[m] = winograd_weights(self._w, m)
        return self.winograd[m]

    def row_weights(self) -> np.ndarray:
        """The weights laid out for the row tiles (``kernels._row_conv.pack``), made on the first
        call that takes them and kept: the layers of every input shape share one copy."""
        if self._rows is None:  # idempotent, as winograd_filters
            self._rows = _row_conv.pack(self.matrix.reshape(-1, self.matrix.shape[-1]), math.prod(self._shape[2:]))
        return self._rows


def _winograd_tile(packed: PackedConv | None, x, strides, dilations, out) -> int:
    """The Winograd output tile size for this call, or 0 for im2col."""
    if packed is None or not packed.uses_winograd or x.ndim != 4 or x.dtype != np.float32:
        return 0
    if any(s != 1 for s in strides or (1, 1)) or any(d != 1 for d in dilations or (1, 1)):
        return 0
    n = x.shape[0]
    if n * -(-out[0] // 4) * -(-out[1] // 4) >= WINOGRAD_MIN_TILES:
        return 4
    if x.shape[1] >= WINOGRAD_F2_MIN_CHANNELS and n * -(-out[0] // 2) * -(-out[1] // 2) >= 36:
        return 2
    return 0


def _shifts(tile: int, strides, maps: int, channels: int, out) -> bool:
    """Whether a shiftable layer takes the shifted path: stride 1 and narrowing (half the
    channels or fewer: always cheaper), or not widening, without a Winograd tile and on a map of
    at least 14×14 (smaller maps' padding columns make the stacked product mostly waste)."""
    if any(s != 1 for s in strides or (1,)):
        return False
    return 2 * maps <= channels or (not tile and math.prod(out) >= SHIFTED_MIN_CELLS)


#: With the compiled tiles (``kernels._f32_conv``), Winograd F(4×4) is used only from this many
#: input channels ...
TILED_WINOGRAD_MIN_CHANNELS = 256
#: ... on maps of at least this many output cells.  Measured at 2 threads (docs/benchmarks.md,
#: "float32 convolutions on compiled tiles"): direct tiles won every layer of up to 128 channels
#: (64 channels at 224×224: 21 against 45 ms) and 256 channels at 14×14; F(4×4) won 256 at 56×56
#: (13.8 against 17.7 ms) and 512 at 28×28 (12.5 against 20.4 ms).
TILED_WINOGRAD_MIN_CELLS = 28 * 28


def _winograd_beats_tiles(tile: int, channels: int, out) -> bool:
    return tile == 4 and channels >= TILED_WINOGRAD_MIN_CHANNELS and math.prod(out) >= TILED_WINOGRAD_MIN_CELLS


#: Input shapes a node keeps its compiled layer for (``PackedConv.remember``); a model fed many
#: shapes (dynamic image sizes) replans the oldest instead of holding every plan and its tables.
_REMEMBERED_SHAPES = 16
_FLOAT32 = np.dtype(np.float32)  # (an identity test: a native float32 array's dtype is this object)


def _remembered_layer(packed: PackedConv, attributes: tuple, x, b, residual, clamp, silu_alpha, out):
    """``(y, layer)``: the convolution of float32 ``x`` by the compiled layer ``packed`` kept for
    its shape and these attributes (:meth:`PackedConv.remember`), and that layer; or ``(None,
    None)`` where none was kept or it cannot take this call (another bias length, the tiles
    switched off, a residual or a SiLU for a depthwise layer): :func:`convolve`'s full path then
    decides.  The tiles store into ``out`` where it is given and fits (:class:`Convolution`)."""
    bound = packed.remembered(x.shape, attributes)  # this shape's compiled layer, made before
    if bound is None or (b is not None and (b.ndim != 1 or len(b) != bound.out_shape[1])):
        return None, None
    if isinstance(bound, (_f32_conv.BoundLayer, _row_conv.BoundRows)):
        settings = run_settings()
        return (bound(x, b, residual, clamp, silu_alpha, settings, out), bound) if settings.tiles else (None, None)
    if residual is None and silu_alpha is None:
        return bound(x, b, clamp), bound  # a depthwise layer or a channel affine
    return None, None


class Convolution:
    """One Conv node's convolution (``Conv``, ``FusedConv``): its attributes fixed and, where its
    weights are constant, packed once (:class:`PackedConv`).  Called as ``convolution(x, w, b,
    residual, clamp, silu_alpha)``, :func:`convolve`'s arguments.

    Why: a call with an input shape seen before goes straight to the compiled layer kept for it;
    through :func:`convolve`'s keyword arguments the same call cost ~1 µs more, a tenth of a
    small layer (an OCR model's, a ShuffleNet's).

    ``out``: where the plan hands a view of a Concat's output (``onnxplug.runtime``'s Concat in
    place, ``accepts_out``), the compiled tiles store the layer there and return it; any other
    path returns its own array, which the Concat copies."""

    __slots__ = ("packed", "op", "geometry", "attributes", "_hot")
    #: The plan may pass ``out=`` (see above).
    accepts_out = True

    def __init__(
        self,
        w: np.ndarray | None,
        group: int,
        op: str = "Conv",
        *,
        kernel_shape=None,
        strides=None,
        dilations=None,
        pads=None,
        auto_pad: str = "NOTSET",
    ) -> None:
        self.packed = None if w is None else PackedConv(w, group, op)
        self.op = op
        self.geometry = dict(
            group=group, kernel_shape=kernel_shape, strides=strides, dilations=dilations, pads=pads, auto_pad=auto_pad
        )
        self.attributes = (kernel_shape, strides, dilations, pads, auto_pad)
        # (input shape, bound layer) of the last call that ran compiled: a call of that shape
        # tries its kept call first (_f32_conv.BoundLayer.again, _depthwise.BoundDepthwise.again)
        self._hot: tuple | None = None

    def __call__(self, x, w, b=None, residual=None, clamp=None, silu_alpha=None, out=None) -> np.ndarray:
        packed = self.packed
        if packed is not None and x.dtype is _FLOAT32:
            hot = self._hot
            if hot is not None and hot[0] == x.shape:
                y = hot[1].again(x, b, residual, clamp, silu_alpha, run_settings(), out)
                if y is not None:
                    return y
            y, bound = _remembered_layer(packed, self.attributes, x, b, residual, clamp, silu_alpha, out)
            if y is not None:
                if hasattr(bound, "again"):  # the tiles' BoundLayer, a BoundDepthwise (not a channel affine)
                    self._hot = (x.shape, bound)
                return y
        return convolve(
            x, w, b, packed=packed, op=self.op, residual=residual, clamp=clamp, silu_alpha=silu_alpha, **self.geometry
        )

    def bind(self, inputs, output, scratch):
        """A ``Conv`` step's ``onnxplug.kernels.Binding`` (inputs ``x, w[, b]``): see :meth:`bind_layer`."""
        x, b = inputs[0], inputs[2] if len(inputs) > 2 else None
        return self.bind_layer(x, b, None, None, None, output, scratch)

    def bind_layer(self, x, b, residual, clamp, silu_alpha, output, scratch, residual_index=None):
        """The compiled layer this node kept for ``x``'s shape (the tiles' ``BoundLayer`` or a
        ``BoundDepthwise``) bound over ``output`` (the plan's segments), or ``None`` where there
        is none or it cannot take this call; arguments as :meth:`__call__`'s, ``residual_index``:
        the residual's position among the step's inputs."""
        packed = self.packed
        if packed is None or x.dtype is not _FLOAT32:
            return None
        bound = packed.remembered(x.shape, self.attributes)
        if bound is None or (b is not None and (b.ndim != 1 or len(b) != bound.out_shape[1])):
            return None
        if isinstance(bound, (_f32_conv.BoundLayer, _row_conv.BoundRows)):
            return bound.bind(x, b, residual, clamp, silu_alpha, output, scratch, residual_index)
        if residual is None and silu_alpha is None and hasattr(bound, "bind"):
            return bound.bind(x, b, clamp, output, scratch)
        return None


def convolve(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    *,
    group: int = 1,
    kernel_shape=None,
    strides=None,
    dilations=None,
    pads=None,
    auto_pad: str = "NOTSET",
    packed: np.ndarray | PackedConv | None = None,
    op: str = "Conv",
    residual: np.ndarray | None = None,
    clamp: tuple[float, float] | None = None,
    silu_alpha: float | None = None,
) -> np.ndarray:
    """ONNX ``Conv`` of ``x`` ``(N, C, *spatial)`` with ``w`` ``(M, C/group, *k)`` and bias ``b``,
    in ``x``'s dtype.  ``packed`` is :func:`pack_conv_weights` or :class:`PackedConv` of ``w`` when
    the caller has it (a :class:`PackedConv` also enables the depthwise and Winograd paths).  The
    result is always a fresh array the caller may modify in place.  ``residual`` (added after the
    bias; broadcastable) and ``clamp`` ``(low, high)`` are FusedConv's Z and its Relu or Clip: with
    the bias they are applied in one compiled pass over the output (``kernels._epilogue``), or in
    the depthwise kernels' store, instead of one numpy pass each.  ``silu_alpha`` is FusedConv's
    QuickGelu (``x / (1 + exp(-silu_alpha·x))``, applied last): in the tiles' store where they
    run the layer (a YOLO's SiLU after every convolution then costs no pass of its own), else
    one compiled pass (:func:`silu`).

    :raises Fail: shapes that do not fit (named with ``op``).
    :raises InvalidArgument: a bad group, kernel, stride or dilation.
    """
    attributes = (kernel_shape, strides, dilations, pads, auto_pad)
    if isinstance(packed, PackedConv) and packed.group == group and x.dtype is _FLOAT32:
        y, _ = _remembered_layer(packed, attributes, x, b, residual, clamp, silu_alpha, None)
        if y is not None:
            return y
    if x.ndim < 3 or w.ndim != x.ndim:
        raise Fail(f"{op}: X shape {list(x.shape)} and W shape {list(w.shape)} do not match")
    nd = x.ndim - 2
    ks = tuple(kernel_shape) if kernel_shape else w.shape[2:]
    if tuple(ks) != w.shape[2:]:
        raise Fail(f"{op}: kernel_shape {list(ks)} differs from the weights' {list(w.shape[2:])}")
    if b is not None and b.shape != w.shape[:1]:
        raise Fail(f"{op}: B shape {list(b.shape)} does not match the {w.shape[0]} output channels of W")
    if x.shape[1] != w.shape[1] * group:
        raise Fail(  # onnxruntime's class for a channel mismatch
            f"{op}: X has {x.shape[1]} channels but W {list(w.shape)} with group={group} needs {w.shape[1] * group}"
        )
    prepared = packed if isinstance(packed, PackedConv) and packed.group == group else None
    if prepared is not None:
        weights = prepared.matrix
    else:
        weights = packed if isinstance(packed, np.ndarray) else pack_conv_weights(w, group, op)
    out, begin, end, _ = pool_geometry(x.shape[2:], ks, strides, dilations, pads, auto_pad, 0, op)
    ct = conv_compute_dtype(x.dtype)
    n, c = x.shape[:2]
    xc = x.astype(ct, copy=False)
    tile = _winograd_tile(prepared, xc, strides, dilations, out)
    bias = None if b is None else b.astype(ct, copy=False)
    # Non-overlapping patches (ViT's 16×16 stride-16 embedding) keep the im2col path: their im2col
    # is one reshaping copy (its product on the tiles where they are on, below).
    patches = tuple(ks) == tuple(strides or ()) and math.prod(ks) > 1
    tiled = nd == 2 and group == 1 and xc.dtype == np.float32 and weights.dtype == np.float32 and not patches
    depthwise = prepared is not None and prepared.depthwise is not None
    grouped = nd == 2 and group > 1 and not depthwise and xc.dtype == np.float32 and weights.dtype == np.float32
    # Ungrouped layers (but the wide ones Winograd wins) and grouped ones, all groups in one call:
    # each group reads its block of channels (ShuffleNet's grouped 1×1 layers in place) and
    # writes its rows of the output.
    if _f32_conv.available() and ((tiled and not _winograd_beats_tiles(tile, c, out)) or (grouped and not patches)):
        matrix = weights.reshape(-1, weights.shape[-1])
        rows = None
        if tiled and nd == 2 and _row_conv.available():  # (ungrouped: tiled)
            spacing = tuple(dilations) if dilations else (1, 1)
            rows = _row_conv.plan(x.shape, matrix.shape[0], ks, tuple(strides or (1, 1)), spacing, (*begin, *end), out)
        if rows is not None:
            bound = _row_conv.BoundRows(rows, matrix, None if prepared is None else prepared.row_weights())
        else:
            geometry = (tuple(a) if a else None for a in (ks, strides, dilations, pads))
            layer = _f32_conv.plan(x.shape, matrix.shape[0], group, *geometry, auto_pad)
            bound = _f32_conv.BoundLayer(layer, matrix)
        if prepared is not None and x.dtype == np.float32:
            prepared.remember(x.shape, attributes, bound)
        return bound(xc, bias, residual, clamp, silu_alpha).astype(x.dtype, copy=False)
    if prepared is not None and prepared.shiftable and _shifts(tile, strides, w.shape[0], c, out):
        dl = tuple(dilations) if dilations else (1, 1)
        y = shifted_conv(xc, prepared.stacked_filters(), ks, dl, begin, end, out, bias)
        bias = None  # added in the final copy
    elif tile:
        y = winograd_conv(xc, prepared.winograd_filters(tile), tile, begin, out, bias)
        bias = None
    elif prepared is not None and prepared.depthwise is not None:
        st = tuple(strides) if strides else (1, 1)
        dl = tuple(dilations) if dilations else (1, 1)
        # The bias and the clamp in the kernel's store; a residual is added between the two.
        in_store = clamp if residual is None else None
        bound = _depthwise.plan_depthwise(xc, prepared.depthwise, begin, end, out, st, dl)
        if bound is None:
            y = _depthwise.depthwise_conv_numpy(xc, prepared.depthwise, begin, end, out, st, dl, bias, in_store)
        else:
            if x.dtype == np.float32:
                prepared.remember(x.shape, attributes, bound)
            y = bound(xc, bias, in_store)
        bias, clamp = None, None if in_store is not None else clamp
    elif out == x.shape[2:] and all(k == 1 for k in ks) and not any(begin):
        # A pointwise convolution is a plain matmul over channels: no im2col copy.
        pixels = xc.reshape(n, group, c // group, math.prod(out))
        y = np.matmul(weights, pixels).reshape((n, w.shape[0]) + out)
    else:
        view = windows(xc, out, begin, end, ks, strides, dilations, 0)
        # (N, C, *out, *k) -> (N, g, C/g*K, P): the im2col copy.  Output positions stay the
        # innermost axis, so the copy reads input rows in order and the product lands in
        # (N, M, *out) layout without a transpose.
        view = view.reshape((n, group, c // group) + view.shape[2:])
        order = (0, 1, 2) + tuple(range(3 + nd, 3 + 2 * nd)) + tuple(range(3, 3 + nd))
        cols = view.transpose(order).reshape(n, group, (c // group) * math.prod(ks), math.prod(out))
        # ViT's patch embedding takes the tiles where they are on: its run's MatMuls run on the
        # team too (kernels._f32_matmul), and an OpenBLAS product at two threads first would leave
        # its worker polling beside the team for a tenth of a second (vit-base: 156 against 109 ms)
        product = _f32_products.matmul if patches and xc.dtype == np.float32 else np.matmul
        y = product(weights, cols).reshape((n, w.shape[0]) + out)  # (N, g, M/g, P)
    y = finish(y, bias, residual, clamp)
    if silu_alpha is not None:
        y = silu(y, silu_alpha, out=y)
    return y.astype(x.dtype, copy=False)

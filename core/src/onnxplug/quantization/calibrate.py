"""Calibration: the real ranges of a model's activations, measured by running it on onnxplug.

The tensors to measure are made graph outputs of a copy of the model, which then runs on an
onnxplug session (any provider — ``calibration_providers`` — never onnxruntime) once per sample
the ``CalibrationDataReader`` yields.  Each method reduces what it saw to one ``(rmin, rmax)``
per tensor, with onnxruntime's semantics:

- MinMax: the smallest minimum and largest maximum over all samples, or their exponential moving
  average (``moving_average``, weight ``averaging_constant``); ``symmetric`` makes it ±absmax.
- Percentile: a histogram (of |x| when symmetric, the default) and the value below which
  ``percentile`` % of the samples lie, clamped to what was seen.
- Entropy: a histogram, and the threshold whose quantized distribution is closest (KL
  divergence) to the measured one, as TensorRT's calibrator chooses it.
- Distribution: the range covering the histogram's mass, for float8 (treated like Percentile at 100).
"""

from __future__ import annotations

import abc
import copy
from collections.abc import Callable, Iterable
from enum import Enum

import numpy as np
import onnx

from ..errors import InvalidArgument

__all__ = ["CalibrationDataReader", "CalibrationMethod", "TensorData", "TensorsData", "collect_ranges"]


class CalibrationMethod(Enum):
    MinMax = 0
    Entropy = 1
    Percentile = 2
    Distribution = 3


class CalibrationDataReader(metaclass=abc.ABCMeta):
    """The samples calibration runs on: ``get_next()`` returns one feed dict, then None.

    Subclass it as for onnxruntime; iterating over a reader calls ``get_next`` until None.
    """

    @classmethod
    def __subclasshook__(cls, subclass):
        return hasattr(subclass, "get_next") and callable(subclass.get_next) or NotImplemented

    @abc.abstractmethod
    def get_next(self) -> dict:
        """The next sample as ``{input name: array}``, or None when there are no more."""
        raise NotImplementedError

    def __iter__(self):
        return self

    def __next__(self):
        result = self.get_next()
        if result is None:
            raise StopIteration
        return result

    def set_range(self, start_index: int, end_index: int) -> None:
        """Restrict the reader to a slice of its samples (for strided calibration); optional."""
        raise NotImplementedError


class TensorData:
    """The calibrated range of one tensor (``lowest``/``highest``, the fields onnxruntime exposes)."""

    def __init__(self, lowest, highest, **extra):
        self.lowest = np.asarray(lowest, dtype=np.float32)
        self.highest = np.asarray(highest, dtype=np.float32)
        for name, value in extra.items():
            setattr(self, name, value)

    @property
    def range_value(self):
        return (self.lowest, self.highest)

    def __repr__(self) -> str:
        return f"TensorData(lowest={float(self.lowest)}, highest={float(self.highest)})"


class TensorsData(dict):
    """``{tensor name: TensorData}`` with the method that produced it."""

    def __init__(self, calibration_method, data: dict):
        super().__init__(data)
        self.calibration_method = calibration_method


# --- collectors ---------------------------------------------------------------------------


class _MinMax:
    def __init__(self, symmetric=False, moving_average=False, averaging_constant=0.01, **_):
        if moving_average and not 0 <= averaging_constant <= 1:
            raise InvalidArgument(f"CalibMovingAverageConstant must be in [0, 1], got {averaging_constant}")
        self.symmetric = bool(symmetric)
        self.moving_average = bool(moving_average)
        self.constant = float(averaging_constant)
        self.ranges: dict[str, tuple[float, float]] = {}

    def add(self, name, values):
        low, high = (float(values.min()), float(values.max())) if values.size else (0.0, 0.0)
        if name not in self.ranges:
            self.ranges[name] = (low, high)
        elif self.moving_average:
            old_low, old_high = self.ranges[name]
            c = self.constant
            self.ranges[name] = (old_low + c * (low - old_low), old_high + c * (high - old_high))
        else:
            old_low, old_high = self.ranges[name]
            self.ranges[name] = (min(old_low, low), max(old_high, high))

    def result(self):
        out = {}
        for name, (low, high) in self.ranges.items():
            if self.symmetric:
                bound = max(abs(low), abs(high))
                low, high = -bound, bound
            out[name] = (low, high)
        return out


class _Histogram:
    """Histograms whose edges grow as larger values appear (old counts re-binned into the new
    edges), so one pass over the samples suffices."""

    def __init__(self, method, symmetric, num_bins, percentile=99.999, num_quantized_bins=128, **_):
        self.method = method
        self.symmetric = bool(symmetric)
        self.num_bins = int(num_bins)
        self.percentile = float(percentile)
        self.num_quantized_bins = int(num_quantized_bins)
        if not 0 <= self.percentile <= 100:
            raise InvalidArgument(f"CalibPercentile must be in [0, 100], got {percentile}")
        self.hist: dict[str, list] = {}

    def add(self, name, values):
        values = values.astype(np.float32).ravel()
        if not values.size:
            return
        data = np.abs(values) if self.symmetric else values
        low, high = float(values.min()), float(values.max())
        lo_edge, hi_edge = (0.0, float(data.max())) if self.symmetric else (low, high)
        if name not in self.hist:
            hi_edge = hi_edge if hi_edge > lo_edge else lo_edge + 1e-8
            counts, edges = np.histogram(data, self.num_bins, range=(lo_edge, hi_edge))
            self.hist[name] = [counts.astype(np.float64), edges, low, high]
            return
        counts, edges, seen_low, seen_high = self.hist[name]
        if lo_edge < edges[0] or hi_edge > edges[-1]:
            new_lo, new_hi = min(lo_edge, edges[0]), max(hi_edge, edges[-1])
            centres = (edges[:-1] + edges[1:]) / 2
            counts, edges = np.histogram(centres, self.num_bins, range=(new_lo, new_hi), weights=counts)
        counts = counts + np.histogram(data, bins=edges)[0]
        self.hist[name] = [counts, edges, min(seen_low, low), max(seen_high, high)]

    def result(self):
        out = {}
        for name, (counts, edges, low, high) in self.hist.items():
            if self.method is CalibrationMethod.Entropy:
                threshold = _entropy_threshold(counts, edges, self.num_quantized_bins)
                out[name] = (-threshold, threshold) if self.symmetric else (max(low, -threshold), min(high, threshold))
                if not self.symmetric and low >= 0:
                    out[name] = (low, min(high, threshold))
                continue
            percentile = 100.0 if self.method is CalibrationMethod.Distribution else self.percentile
            cdf = np.cumsum(counts / max(counts.sum(), 1))
            if self.symmetric:
                right = edges[min(np.searchsorted(cdf, percentile / 100.0) + 1, len(edges) - 1)]
                pair = (-right, right)
            else:
                cut = (100.0 - percentile) / 200.0
                pair = (edges[np.searchsorted(cdf, cut)], edges[min(np.searchsorted(cdf, 1 - cut) + 1, len(edges) - 1)])
            out[name] = (max(float(pair[0]), low), min(float(pair[1]), high))
        return out


def _entropy_threshold(counts, edges, num_quantized_bins):
    """The |x| threshold minimising KL(P || Q), P the histogram clipped at the threshold (outliers
    folded into its last bin) and Q that histogram merged into ``num_quantized_bins`` levels."""
    centres_abs = np.abs((edges[:-1] + edges[1:]) / 2)
    order = np.argsort(centres_abs)
    width = float(edges[1] - edges[0])
    top = float(centres_abs.max()) + width
    bins = len(counts)
    folded, _ = np.histogram(centres_abs[order], bins, range=(0, top), weights=counts[order])
    fold_edges = np.linspace(0, top, bins + 1)
    best, best_kl = bins, np.inf
    for stop in range(num_quantized_bins, bins + 1, max(1, bins // 256)):
        p = folded[:stop].copy()
        p[-1] += folded[stop:].sum()
        nonzero = p > 0
        chunks = np.array_split(np.arange(stop), num_quantized_bins)
        q = np.zeros(stop)
        for chunk in chunks:
            mass = p[chunk].sum()
            support = nonzero[chunk].sum()
            if support:
                q[chunk] = np.where(nonzero[chunk], mass / support, 0)
        ps, qs = p / p.sum(), q / max(q.sum(), 1e-30)
        mask = nonzero & (qs > 0)
        kl = float(np.sum(ps[mask] * np.log(ps[mask] / qs[mask]))) + (np.inf if (nonzero & (qs == 0)).any() else 0)
        if kl < best_kl:
            best, best_kl = stop, kl
    return float(fold_edges[best])


def _collector(method: CalibrationMethod, options: dict):
    if method is CalibrationMethod.MinMax:
        return _MinMax(**options)
    if method is CalibrationMethod.Entropy:
        return _Histogram(method, options.get("symmetric", False), options.get("num_bins", 128), **_rest(options))
    if method in (CalibrationMethod.Percentile, CalibrationMethod.Distribution):
        symmetric = options.get("symmetric", True)
        return _Histogram(method, symmetric, options.get("num_bins", 2048), **_rest(options))
    raise InvalidArgument(f"unknown calibration method {method!r}")


def _rest(options):
    return {k: v for k, v in options.items() if k not in ("symmetric", "num_bins")}


# --- running -------------------------------------------------------------------------------


def _with_outputs(model: onnx.ModelProto, names: Iterable[str]) -> onnx.ModelProto:
    """A copy of ``model`` whose graph also outputs ``names`` (float tensors, shape left open)."""
    augmented = copy.deepcopy(model)
    present = {o.name for o in augmented.graph.output}
    for name in names:
        if name not in present:
            augmented.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
            augmented.graph.output[-1].type.tensor_type.elem_type = onnx.TensorProto.FLOAT
            present.add(name)
    return augmented


def collect_ranges(
    model: onnx.ModelProto,
    tensor_names: list[str],
    reader,
    method: CalibrationMethod = CalibrationMethod.MinMax,
    options: dict | None = None,
    providers=None,
    progress: Callable[[int], None] | None = None,
) -> TensorsData:
    """Run ``model`` on onnxplug over every sample of ``reader``; the range of each named tensor.

    ``progress`` (if given) is called with the number of samples done after each one, for a
    progress bar.  A reader that yields nothing is an error: there would be no ranges.
    """
    from ..runtime import GraphOptimizationLevel, InferenceSession, SessionOptions

    method = CalibrationMethod(method) if not isinstance(method, CalibrationMethod) else method
    collector = _collector(method, dict(options or {}))
    augmented = _with_outputs(model, tensor_names)
    session_options = SessionOptions()
    # Optimizations could fuse away the very tensors being measured; calibration runs the graph as written.
    session_options.graph_optimization_level = GraphOptimizationLevel.ORT_DISABLE_ALL
    session = InferenceSession(augmented.SerializeToString(), session_options, providers=providers)
    output_names = [o.name for o in session.get_outputs()]
    wanted = set(tensor_names)
    count = 0
    while True:
        feed = reader.get_next()
        if feed is None:
            break
        values = session.run(None, feed)
        for name, value in zip(output_names, values, strict=True):
            if name in wanted and isinstance(value, np.ndarray) and value.dtype.kind == "f":
                collector.add(name, value)
        count += 1
        if progress is not None:
            progress(count)
    if not count:
        raise InvalidArgument("the calibration data reader returned no samples (get_next() gave None at once)")
    ranges = collector.result()
    return TensorsData(method, {name: TensorData(low, high) for name, (low, high) in ranges.items()})

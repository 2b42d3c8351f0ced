"""Spatial sampling and detection: GridSample, AffineGrid, RoiAlign, NonMaxSuppression.

ImageDecoder lives in image_decode.py (decoded by Pillow, the optional ``image`` extra).

GridSample gathers every output position at once for each interpolation tap (2 per axis for
linear, 4 for cubic); RoiAlign's average mode is separable into two small matrices per roi, and
its max mode gathers all sampling points; NonMaxSuppression computes each class's IoU matrix in
one go and only the greedy pick itself loops, once per kept box.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from onnxplug.errors import Fail, InvalidArgument
from onnxplug.kernels import check_allocation

from ._registry import kernel


def _compute_dtype(dtype):
    return np.float64 if dtype == np.float64 else np.float32


# --- GridSample --------------------------------------------------------------------------------


def _reflect(x, low, high):
    """Fold coordinates into ``[low, high]`` by mirroring at the borders (repeatedly)."""
    span = high - low
    if span <= 0:
        return np.full_like(x, low)
    below = x < low
    distance = np.where(below, low - x, x - high)
    flips = np.floor(distance / span)
    rest = distance - flips * span
    even = flips % 2 == 0
    from_below = np.where(even, low + rest, high - rest)
    from_above = np.where(even, high - rest, low + rest)
    return np.where(below, from_below, np.where(x > high, from_above, x))


def _cubic_weights(t, a=-0.75):
    """Weights of taps at offsets -1, 0, 1, 2 from ``floor(x)``, ``t`` the fractional part."""

    def near(d):
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _axis_taps(coord, size, mode, padding_mode, low, high):
    """``[(index, weight, valid)]`` per tap for one spatial axis; coordinates already padded."""
    if mode == "nearest":
        offsets, weights = [np.rint(coord)], [np.ones_like(coord)]
    elif mode == "linear":
        base = np.floor(coord)
        t = coord - base
        offsets, weights = [base, base + 1], [1 - t, t]
    else:
        base = np.floor(coord)
        t = coord - base
        offsets = [base - 1, base, base + 1, base + 2]
        weights = _cubic_weights(t)
    taps = []
    for index, weight in zip(offsets, weights):
        if padding_mode == "zeros":
            valid = (index >= 0) & (index <= size - 1)
        else:
            if padding_mode == "reflection":
                index = np.trunc(_reflect(index, low, high))
            valid = np.ones(index.shape, dtype=bool)
        taps.append((np.clip(index, 0, size - 1).astype(np.int64), weight, valid))
    return taps


def _grid_sample(x, grid, mode, padding_mode, align_corners):
    if x.ndim < 3 or grid.ndim != x.ndim or grid.shape[-1] != x.ndim - 2 or grid.shape[0] != x.shape[0]:
        raise InvalidArgument(f"GridSample: X shape {list(x.shape)} and grid shape {list(grid.shape)} do not match")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise Fail(f"GridSample: unknown padding_mode {padding_mode!r}")
    n, c = x.shape[:2]
    spatial = x.shape[2:]
    nd = len(spatial)
    out_spatial = grid.shape[1:-1]
    g = grid.reshape(n, -1, nd).astype(np.float64)
    per_axis = []
    for d in range(nd):
        size = spatial[d]
        normalized = g[:, :, nd - 1 - d]  # the grid lists x (last axis) first
        if align_corners:
            coord = (normalized + 1) / 2 * (size - 1)
            low, high = 0.0, size - 1.0
        else:
            coord = ((normalized + 1) * size - 1) / 2
            low, high = -0.5, size - 0.5
        if mode == "nearest":
            coord = np.rint(coord)
        outside = (coord < low) | (coord > high)
        if padding_mode == "border":
            coord = np.where(outside, np.clip(coord, 0, size - 1), coord)
        elif padding_mode == "reflection":
            coord = np.where(outside, _reflect(coord, low, high), coord)
        per_axis.append(_axis_taps(coord, size, mode, padding_mode, low, high))
    strides = [math.prod(spatial[d + 1 :]) for d in range(nd)]
    flat = x.reshape(n, c, -1)
    acc = _compute_dtype(x.dtype)
    result = None
    for combo in itertools.product(*per_axis):
        index = sum(tap[0] * stride for tap, stride in zip(combo, strides))
        valid = np.logical_and.reduce([tap[2] for tap in combo])
        values = np.take_along_axis(flat, index[:, None, :], axis=2)
        if mode == "nearest":
            term = np.where(valid[:, None, :], values, x.dtype.type(0))
            result = term  # a single tap
            continue
        weight = np.prod([tap[1] for tap in combo], axis=0) * valid
        term = values.astype(acc) * weight.astype(acc)[:, None, :]
        result = term if result is None else result + term
    return result.reshape((n, c) + tuple(out_spatial)).astype(x.dtype)


@kernel("GridSample", since=(16,))
def grid_sample_16(x, grid, *, align_corners, mode, padding_mode):
    names = {"bilinear": "linear", "bicubic": "cubic", "nearest": "nearest"}
    if mode not in names:
        raise Fail(f"GridSample: unknown mode {mode!r}")
    if x.ndim != 4:
        raise Fail(f"GridSample-16 takes 4-D input, got shape {list(x.shape)}")
    return _grid_sample(x, grid, names[mode], padding_mode, align_corners)


@kernel("GridSample", since=(20, 22))
def grid_sample_20(x, grid, *, align_corners, mode, padding_mode):
    if mode not in ("linear", "cubic", "nearest"):
        raise Fail(f"GridSample: unknown mode {mode!r}")
    if mode == "cubic" and x.ndim != 4:
        raise Fail(f"GridSample: cubic mode supports 4-D input only, got shape {list(x.shape)}")
    return _grid_sample(x, grid, mode, padding_mode, align_corners)


# --- AffineGrid --------------------------------------------------------------------------------


@kernel("AffineGrid", since=(20,), host_inputs=(1,))
def affine_grid(theta, size, *, align_corners):
    size = [int(v) for v in np.asarray(size).reshape(-1)]
    nd = len(size) - 2
    if nd not in (2, 3) or theta.shape != (size[0], nd, nd + 1):
        raise InvalidArgument(f"AffineGrid: theta shape {list(theta.shape)} does not fit size {size}")
    check_allocation([size[0], *size[2:], nd], theta.dtype, "AffineGrid output")
    acc = _compute_dtype(theta.dtype)
    axes = []
    for extent in size[2:]:
        steps = np.arange(extent, dtype=acc)
        if align_corners:
            axes.append(np.linspace(-1, 1, extent, dtype=acc) if extent > 1 else np.full(extent, -1, acc))
        else:
            axes.append((2 * steps + 1) / extent - 1)
    # Homogeneous base points ordered (x, y[, z], 1) with the last axis varying fastest.
    mesh = np.meshgrid(*axes, indexing="ij")
    points = np.stack([m.reshape(-1) for m in reversed(mesh)] + [np.ones(mesh[0].size, acc)], axis=-1)
    grid = points @ theta.astype(acc).transpose(0, 2, 1)  # (N, P, nd)
    return grid.reshape([size[0]] + size[2:] + [nd]).astype(theta.dtype)


# --- RoiAlign ----------------------------------------------------------------------------------


def _roi_samples(start, extent, pooled, grid, limit):
    """Per roi, bin and sample: the two corner indices and weights along one axis.

    Returns ``(low, high, w_low, w_high, valid)`` of shape ``(R, pooled, G)`` where ``G`` is the
    largest sampling grid; samples past a roi's own grid are not valid.
    """
    most = max(int(grid.max()) if grid.size else 1, 1)
    bins = extent / pooled
    sample = np.arange(most)
    pos = (
        start[:, None, None]
        + np.arange(pooled)[None, :, None] * bins[:, None, None]
        + (sample[None, None, :] + 0.5) * (bins / np.maximum(grid, 1))[:, None, None]
    )
    valid = np.broadcast_to(sample[None, None, :] < grid[:, None, None], pos.shape)
    outside = (pos < -1.0) | (pos > limit)
    pos = np.maximum(pos, 0)
    low = np.floor(pos).astype(np.int64)
    at_edge = low >= limit - 1
    low = np.where(at_edge, limit - 1, low)
    high = np.where(at_edge, limit - 1, low + 1)
    pos = np.where(at_edge, low, pos)
    frac = pos - low
    zero = outside
    return low, high, np.where(zero, 0, 1 - frac), np.where(zero, 0, frac), valid


def _roi_align(x, rois, batch_indices, mode, output_height, output_width, sampling_ratio, spatial_scale, half_pixel):
    if x.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 4 or batch_indices.shape != (rois.shape[0],):
        raise InvalidArgument(
            f"RoiAlign: X {list(x.shape)}, rois {list(rois.shape)} and batch_indices "
            f"{list(batch_indices.shape)} are inconsistent"
        )
    n, c, height, width = x.shape
    batch = batch_indices.astype(np.int64)
    if batch.size and (batch.min() < 0 or batch.max() >= n):
        raise InvalidArgument(f"RoiAlign: a batch index is outside [0, {n})")
    if mode not in ("avg", "max"):
        raise Fail(f"RoiAlign: unknown mode {mode!r}")
    acc = _compute_dtype(x.dtype)
    boxes = rois.astype(np.float64) * spatial_scale - (0.5 if half_pixel else 0.0)
    roi_w = boxes[:, 2] - boxes[:, 0]
    roi_h = boxes[:, 3] - boxes[:, 1]
    if not half_pixel:
        roi_w, roi_h = np.maximum(roi_w, 1.0), np.maximum(roi_h, 1.0)
    ph, pw = output_height, output_width
    if sampling_ratio > 0:
        grid_h = np.full(len(rois), sampling_ratio, dtype=np.int64)
        grid_w = grid_h
    else:
        grid_h = np.ceil(roi_h / ph).astype(np.int64)
        grid_w = np.ceil(roi_w / pw).astype(np.int64)
    ys = _roi_samples(boxes[:, 1], roi_h, ph, grid_h, height)
    xs = _roi_samples(boxes[:, 0], roi_w, pw, grid_w, width)
    r = len(rois)
    out = np.zeros((r, c, ph, pw), dtype=acc)
    if r == 0:
        return out.astype(x.dtype)
    if mode == "avg":

        def matrix(low, high, w_low, w_high, valid, limit):
            cells = np.arange(limit)
            m = (low[..., None] == cells) * w_low[..., None] + (high[..., None] == cells) * w_high[..., None]
            return (m * valid[..., None]).sum(axis=2)  # (R, pooled, limit)

        ay = matrix(*ys, height)
        ax = matrix(*xs, width)
        count = np.maximum(grid_h * grid_w, 1).astype(acc)
        xa = x.astype(acc)
        for b in np.unique(batch):
            sel = np.nonzero(batch == b)[0]
            # Rows first: (R*ph, H) @ (H, C*W), then columns: (R, ph*C, W) @ (R, W, pw).
            rows = ay[sel].astype(acc).reshape(-1, height) @ xa[b].transpose(1, 0, 2).reshape(height, -1)
            rows = rows.reshape(len(sel), ph * c, width)
            pooled = rows @ ax[sel].astype(acc).transpose(0, 2, 1)  # (R, ph*C, pw)
            pooled = pooled.reshape(len(sel), ph, c, pw).transpose(0, 2, 1, 3)
            out[sel] = pooled / count[sel, None, None, None]
        return out.astype(x.dtype)
    # max: the largest weighted corner over every sample point of the bin.
    best = np.full((r, ph, grid_h.max(initial=1), pw, grid_w.max(initial=1), c), -np.inf, dtype=acc)
    bi = batch[:, None, None, None, None]
    for yi, wy in ((ys[0], ys[2]), (ys[1], ys[3])):
        for xi, wx in ((xs[0], xs[2]), (xs[1], xs[3])):
            values = x[bi, :, yi[:, :, :, None, None], xi[:, None, None, :, :]].astype(acc)
            weight = wy[:, :, :, None, None] * wx[:, None, None, :, :]
            np.maximum(best, values * weight[..., None].astype(acc), out=best)
    valid = ys[4][:, :, :, None, None] & xs[4][:, None, None, :, :]
    best = np.where(valid[..., None], best, -np.inf).max(axis=(2, 4))  # (R, ph, pw, C)
    best = np.where(np.isneginf(best), 0, best)
    return best.transpose(0, 3, 1, 2).astype(x.dtype)


@kernel("RoiAlign", since=(10,))
def roi_align_10(x, rois, batch_indices, *, mode, output_height, output_width, sampling_ratio, spatial_scale):
    # Opset 10 had no coordinate mode; its behaviour is what 16 calls output_half_pixel.
    return _roi_align(x, rois, batch_indices, mode, output_height, output_width, sampling_ratio, spatial_scale, False)


@kernel("RoiAlign", since=(16, 22))
def roi_align_16(
    x,
    rois,
    batch_indices,
    *,
    coordinate_transformation_mode,
    mode,
    output_height,
    output_width,
    sampling_ratio,
    spatial_scale,
):
    if coordinate_transformation_mode not in ("half_pixel", "output_half_pixel"):
        raise Fail(f"RoiAlign: unknown coordinate_transformation_mode {coordinate_transformation_mode!r}")
    return _roi_align(
        x,
        rois,
        batch_indices,
        mode,
        output_height,
        output_width,
        sampling_ratio,
        spatial_scale,
        coordinate_transformation_mode == "half_pixel",
    )


# --- NonMaxSuppression -------------------------------------------------------------------------


def _corners(boxes, center_point_box):
    """``(y1, x1, y2, x2)`` with ``y1 <= y2`` and ``x1 <= x2``."""
    b = boxes.astype(np.float64)
    if center_point_box:
        xc, yc, w, h = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
        return yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2
    return (
        np.minimum(b[..., 0], b[..., 2]),
        np.minimum(b[..., 1], b[..., 3]),
        np.maximum(b[..., 0], b[..., 2]),
        np.maximum(b[..., 1], b[..., 3]),
    )


def _iou_matrix(y1, x1, y2, x2):
    area = (y2 - y1) * (x2 - x1)
    inter_h = np.clip(np.minimum(y2[:, None], y2[None, :]) - np.maximum(y1[:, None], y1[None, :]), 0, None)
    inter_w = np.clip(np.minimum(x2[:, None], x2[None, :]) - np.maximum(x1[:, None], x1[None, :]), 0, None)
    inter = inter_h * inter_w
    union = area[:, None] + area[None, :] - inter
    # Degenerate boxes (no area) never suppress anything.
    usable = (union > 0) & (area[:, None] > 0) & (area[None, :] > 0)
    return np.where(usable, inter / np.where(usable, union, 1), 0.0)


@kernel("NonMaxSuppression", since=(10, 11), host_inputs=(2, 3, 4))
def non_max_suppression(
    boxes, scores, max_output_boxes_per_class=None, iou_threshold=None, score_threshold=None, *, center_point_box
):
    if (
        boxes.ndim != 3
        or boxes.shape[2] != 4
        or scores.ndim != 3
        or scores.shape[0] != boxes.shape[0]
        or scores.shape[2] != boxes.shape[1]
    ):
        raise InvalidArgument(
            f"NonMaxSuppression: boxes {list(boxes.shape)} and scores {list(scores.shape)} are inconsistent"
        )
    limit = (
        0
        if max_output_boxes_per_class is None or np.asarray(max_output_boxes_per_class).size == 0
        else int(np.asarray(max_output_boxes_per_class).reshape(-1)[0])
    )
    threshold = (
        0.0
        if iou_threshold is None or np.asarray(iou_threshold).size == 0
        else float(np.asarray(iou_threshold).reshape(-1)[0])
    )
    min_score = (
        None
        if score_threshold is None or np.asarray(score_threshold).size == 0
        else float(np.asarray(score_threshold).reshape(-1)[0])
    )
    if not 0.0 <= threshold <= 1.0:
        raise InvalidArgument(f"NonMaxSuppression: iou_threshold must be in [0, 1], got {threshold}")
    selected = []
    if limit > 0:
        corners = _corners(boxes, center_point_box)
        for b in range(boxes.shape[0]):
            iou = _iou_matrix(*(part[b] for part in corners))
            for cls in range(scores.shape[1]):
                s = scores[b, cls].astype(np.float64)
                order = np.argsort(-s, kind="stable")
                if min_score is not None:
                    order = order[s[order] > min_score]
                alive = np.ones(len(order), dtype=bool)
                kept = 0
                while kept < limit:
                    live = np.flatnonzero(alive)
                    if live.size == 0:
                        break
                    pick = order[live[0]]
                    selected.append((b, cls, pick))
                    kept += 1
                    alive[live[0]] = False
                    alive &= ~(iou[pick, order] > threshold)
    if not selected:
        return np.zeros((0, 3), dtype=np.int64)
    return np.array(selected, dtype=np.int64)

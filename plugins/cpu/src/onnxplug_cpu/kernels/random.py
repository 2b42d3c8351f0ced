"""Random generators: RandomNormal, RandomUniform, their *Like forms, Bernoulli, Multinomial.

With a ``seed`` attribute every run starts a fresh ``numpy.random.Generator`` from that seed, so
the same node gives the same values on every run and in every session (and runs from several
threads cannot disturb each other's draws).  Without a seed each run draws from fresh OS entropy,
unless ``onnxplug.set_seed`` fixed the process-wide sequence.
The seed is a float attribute; its exact bit pattern seeds the generator, so 0.5 and 0.75 differ.
Values will not match onnxruntime's or numpy's legacy ``RandomState`` streams.
"""

from __future__ import annotations

import numpy as np

from onnxplug.errors import InvalidArgument
from onnxplug.graph import np_dtype
from onnxplug.kernels import check_allocation, unseeded_rng

from ._registry import kernel

_FLOAT_KINDS = "f"


def _generator(seed):
    if seed is None or np.isnan(seed):
        return unseeded_rng()  # fresh entropy, or the sequence onnxplug.set_seed fixed
    return np.random.default_rng(int(np.float64(seed).view(np.uint64)))


def _float_dtype(dtype, op):
    """The numpy dtype for a float ``dtype`` attribute (float16, float, double, bfloat16)."""
    result = np_dtype(dtype)
    if result.kind not in _FLOAT_KINDS and result.name != "bfloat16":
        raise InvalidArgument(f"{op}: dtype {result} is not a floating-point type")
    return result


def _work_dtype(dtype):
    """numpy's Generator draws float32 or float64; narrower types are drawn as float32."""
    return np.float64 if dtype == np.float64 else np.float32


def _normal(shape, dtype, mean, scale, seed, op):
    shape = check_allocation(shape, dtype, f"{op} output")
    values = _generator(seed).standard_normal(shape, dtype=_work_dtype(dtype))
    return (values * scale + mean).astype(dtype, copy=False)


def _uniform(shape, dtype, low, high, seed, op):
    shape = check_allocation(shape, dtype, f"{op} output")
    if not high >= low:
        raise InvalidArgument(f"{op}: high {high} is below low {low}")
    values = _generator(seed).random(shape, dtype=_work_dtype(dtype))
    return (values * (high - low) + low).astype(dtype, copy=False)


@kernel("RandomNormal", since=(1, 22))
def random_normal(*, shape, dtype, mean, scale, seed=None):
    return _normal(shape, _float_dtype(dtype, "RandomNormal"), mean, scale, seed, "RandomNormal")


@kernel("RandomUniform", since=(1, 22))
def random_uniform(*, shape, dtype, low, high, seed=None):
    return _uniform(shape, _float_dtype(dtype, "RandomUniform"), low, high, seed, "RandomUniform")


def _like_dtype(input, dtype, op):  # noqa: A002 - the schema's name
    if dtype is not None:
        return _float_dtype(dtype, op)
    if input.dtype.kind not in _FLOAT_KINDS and input.dtype.name != "bfloat16":
        raise InvalidArgument(f"{op}: input of type {input.dtype} needs a floating-point dtype attribute")
    return input.dtype


@kernel("RandomNormalLike", since=(1, 22))
def random_normal_like(input, *, dtype=None, mean, scale, seed=None):  # noqa: A002
    return _normal(input.shape, _like_dtype(input, dtype, "RandomNormalLike"), mean, scale, seed, "RandomNormalLike")


@kernel("RandomUniformLike", since=(1, 22))
def random_uniform_like(input, *, dtype=None, low, high, seed=None):  # noqa: A002
    return _uniform(input.shape, _like_dtype(input, dtype, "RandomUniformLike"), low, high, seed, "RandomUniformLike")


@kernel("Bernoulli", since=(15, 22))
def bernoulli(input, *, dtype=None, seed=None):  # noqa: A002
    """Each output element is 1 with the probability in the matching input element."""
    out_dtype = input.dtype if dtype is None else np_dtype(dtype)
    p = input.astype(np.float64) if input.dtype != np.float64 else input
    if np.any(~((p >= 0) & (p <= 1))):
        raise InvalidArgument("Bernoulli: probabilities must lie in [0, 1] (found values outside, or NaN)")
    draws = _generator(seed).random(p.shape)
    return (draws < p).astype(out_dtype)


@kernel("Multinomial", since=(7, 22))
def multinomial(input, *, dtype, sample_size, seed=None):  # noqa: A002
    """``sample_size`` class indices per row of unnormalised log-probabilities ``[batch, class]``.

    All rows are sampled with one ``searchsorted``: row ``b``'s cumulative distribution is
    shifted to ``[b, b + 1]`` so that the rows' CDFs form one increasing array.
    """
    out_dtype = np_dtype(dtype)
    if out_dtype not in (np.int32, np.int64):
        raise InvalidArgument(f"Multinomial: dtype must be int32 or int64, got {out_dtype}")
    if input.ndim != 2 or input.shape[1] == 0:
        raise InvalidArgument(f"Multinomial: input must be [batch_size, class_size], got {list(input.shape)}")
    if sample_size < 0:
        raise InvalidArgument(f"Multinomial: sample_size {sample_size} is negative")
    batch, classes = input.shape
    check_allocation((batch, sample_size), out_dtype, "Multinomial output")
    logits = input.astype(np.float64)
    weights = np.exp(logits - np.max(logits, axis=1, keepdims=True))
    cdf = np.cumsum(weights, axis=1)
    cdf /= cdf[:, -1:]
    cdf[:, -1] = 1.0
    offsets = np.arange(batch, dtype=np.float64)[:, None]
    draws = _generator(seed).random((batch, sample_size)) + offsets
    flat = np.searchsorted((cdf + offsets).ravel(), draws.ravel(), side="right")
    indices = flat.reshape(batch, sample_size) - np.arange(batch)[:, None] * classes
    return np.clip(indices, 0, classes - 1).astype(out_dtype)

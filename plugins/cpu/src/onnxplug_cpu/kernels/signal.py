"""Signal processing: DFT, STFT, the Hann/Hamming/Blackman windows and MelWeightMatrix.

ONNX carries complex numbers as a trailing dimension of size 2 (real, imaginary); a trailing
dimension of size 1 is a real signal.  The transforms run through ``numpy.fft``
and are cast back to the input's float type;
float32/float16 signals are transformed in complex64, float64 ones in complex128.
"""

from __future__ import annotations

import numpy as np

from onnxplug.errors import InvalidArgument
from onnxplug.graph import np_dtype
from onnxplug.kernels import check_allocation

from ._registry import kernel


def _to_complex(x):
    if x.ndim < 1 or x.shape[-1] not in (1, 2):
        raise InvalidArgument(f"signal's last dimension must be 1 (real) or 2 (complex), got shape {x.shape}")
    # Single precision stays single (numpy.fft keeps complex64), like the reference results.
    real = np.float64 if x.dtype == np.float64 else np.float32
    values = x.astype(real)
    if x.shape[-1] == 1:
        return values[..., 0].astype(np.result_type(real, np.complex64))
    return values[..., 0] + np.complex64(1j) * values[..., 1]


def _from_complex(values, dtype):
    return np.stack((values.real, values.imag), axis=-1).astype(dtype)


def _scalar(value, what):
    array = np.asarray(value)
    if array.size != 1:
        raise InvalidArgument(f"{what} must be a scalar, got shape {array.shape}")
    return int(array.reshape(()))


def _dft(x, dft_length, axis, inverse, onesided):
    rank = x.ndim
    if axis < 0:
        axis += rank
    if not 0 <= axis <= rank - 2:
        raise InvalidArgument(f"DFT axis {axis} is out of range for input of rank {rank}")
    signal = _to_complex(x)
    length = signal.shape[axis] if dft_length is None else _scalar(dft_length, "dft_length")
    if length <= 0:
        raise InvalidArgument(f"dft_length must be positive, got {length}")
    out_shape = list(signal.shape) + [2]
    out_shape[axis] = length
    check_allocation(out_shape, np.complex128, "DFT output")
    if inverse and onesided:
        # The input holds the first n//2+1 bins of a Hermitian spectrum; the output is real.
        if dft_length is None:
            length = 2 * (signal.shape[axis] - 1)
        out = np.fft.irfft(signal, n=length, axis=axis)
        return out[..., None].astype(x.dtype)
    if inverse:
        out = np.fft.ifft(signal, n=length, axis=axis)
    else:
        out = np.fft.fft(signal, n=length, axis=axis)
        if onesided:
            out = np.take(out, np.arange(length // 2 + 1), axis=axis)
    return _from_complex(out, x.dtype)


@kernel("DFT", since=(17,))
def dft_17(x, dft_length=None, *, axis, inverse, onesided):
    return _dft(x, dft_length, axis, inverse, onesided)


@kernel("DFT", since=(20,))
def dft_20(x, dft_length=None, axis=None, *, inverse, onesided):
    axis = -2 if axis is None else _scalar(axis, "axis")
    return _dft(x, dft_length, axis, inverse, onesided)


@kernel("STFT", since=(17,))
def stft(signal, frame_step, window=None, frame_length=None, *, onesided):
    if signal.ndim != 3:
        raise InvalidArgument(f"STFT signal must be [batch, length, 1 or 2], got shape {signal.shape}")
    step = _scalar(frame_step, "frame_step")
    if frame_length is not None:
        length = _scalar(frame_length, "frame_length")
    elif window is not None:
        length = window.shape[0]
    else:
        raise InvalidArgument("STFT needs a window or a frame_length")
    if window is not None and (window.ndim != 1 or window.shape[0] != length):
        raise InvalidArgument(f"window shape {window.shape} does not match frame_length {length}")
    if step <= 0 or length <= 0 or length > signal.shape[1]:
        raise InvalidArgument(
            f"frame_step {step} and frame_length {length} do not fit a signal of length {signal.shape[1]}"
        )
    values = _to_complex(signal)
    frames = 1 + (signal.shape[1] - length) // step
    starts = np.arange(frames) * step
    framed = values[:, starts[:, None] + np.arange(length)]  # [batch, frames, length]
    if window is not None:
        framed = framed * window.astype(framed.real.dtype)
    spectrum = np.fft.fft(framed, axis=-1)
    if onesided:
        spectrum = spectrum[..., : length // 2 + 1]
    return _from_complex(spectrum, signal.dtype)


def _cosine_window(size, periodic, output_datatype, coefficients):
    """sum_k a_k cos(2 pi k n / N) with N = size (periodic) or size - 1 (symmetric)."""
    n = _scalar(size, "size")
    if n < 0:
        raise InvalidArgument(f"window size must be non-negative, got {n}")
    dtype = np_dtype(output_datatype)
    check_allocation((n,), dtype, "window output")
    denominator = n if periodic else n - 1
    phase = 2 * np.pi * np.arange(n, dtype=np.float64) / (denominator if denominator > 0 else 1)
    out = np.zeros(n, np.float64)
    for k, a in enumerate(coefficients):
        out += a * np.cos(k * phase)
    return out.astype(dtype)


@kernel("HannWindow", since=(17,))
def hann_window(size, *, output_datatype, periodic):
    return _cosine_window(size, periodic, output_datatype, (0.5, -0.5))


@kernel("HammingWindow", since=(17,))
def hamming_window(size, *, output_datatype, periodic):
    alpha = 25.0 / 46.0
    return _cosine_window(size, periodic, output_datatype, (alpha, alpha - 1.0))


@kernel("BlackmanWindow", since=(17,))
def blackman_window(size, *, output_datatype, periodic):
    return _cosine_window(size, periodic, output_datatype, (0.42, -0.5, 0.08))


@kernel("MelWeightMatrix", since=(17,))
def mel_weight_matrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz, *, output_datatype):
    """Triangular filters evenly spaced on the mel scale, as ``[dft_length//2 + 1, num_mel_bins]``."""
    bins = _scalar(num_mel_bins, "num_mel_bins")
    length = _scalar(dft_length, "dft_length")
    rate = _scalar(sample_rate, "sample_rate")
    low_hz = float(np.asarray(lower_edge_hertz).reshape(()))
    high_hz = float(np.asarray(upper_edge_hertz).reshape(()))
    if bins <= 0 or length <= 0 or rate <= 0 or not 0 <= low_hz < high_hz:
        raise InvalidArgument(
            f"MelWeightMatrix got num_mel_bins={bins}, dft_length={length}, sample_rate={rate}, "
            f"edges=({low_hz}, {high_hz})"
        )
    spectrogram_bins = length // 2 + 1
    dtype = np_dtype(output_datatype)
    check_allocation((spectrogram_bins, bins), dtype, "MelWeightMatrix output")
    low_mel = 2595 * np.log10(1 + low_hz / 700)
    high_mel = 2595 * np.log10(1 + high_hz / 700)
    # The step divides by num_mel_bins + 2 points (not + 1), like the ONNX reference.
    mels = np.arange(bins + 2) * ((high_mel - low_mel) / (bins + 2)) + low_mel
    hertz = 700 * (np.power(10.0, mels / 2595) - 1)
    edges = np.floor((length + 1) * hertz / rate).astype(np.int64)
    lower, center, upper = edges[:-2], edges[1:-1], edges[2:]
    j = np.arange(spectrogram_bins)[:, None]
    rise_width = center - lower
    fall_width = upper - center
    with np.errstate(divide="ignore", invalid="ignore"):
        rise = np.where(rise_width > 0, (j - lower) / np.maximum(rise_width, 1), 1.0)
        fall = (upper - j) / np.maximum(fall_width, 1)
    out = np.where((j >= lower) & (j <= center), rise, 0.0)
    out = np.where((rise_width == 0) & (j == center), 1.0, out)
    out = np.where((fall_width > 0) & (j >= center) & (j < upper), fall, out)
    return out.astype(dtype)

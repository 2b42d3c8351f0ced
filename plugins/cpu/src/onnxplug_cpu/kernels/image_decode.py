"""ImageDecoder through Pillow: every format the installed Pillow reads (JPEG, PNG, BMP, PNM,
TIFF, GIF, WebP, JPEG 2000, ...).

ONNX's reference implementation and its expected outputs are Pillow's, so matching them exactly
(JPEG's integer IDCT, the fixed-point luma of ``convert("L")``) means decoding with Pillow.
Pillow is optional (``pip install onnxplug-cpu[image]``); without it the op fails naming that
extra, and everything else in the provider works.

Output is ``(H, W, 3)`` uint8 for ``RGB``/``BGR`` (the image converted to RGB: palettes expanded,
alpha dropped, grey repeated) and ``(H, W, 1)`` for ``Grayscale`` (``convert("L")``).  Multi-frame
files (GIF, TIFF) give their first frame.

Bounds: the header is read first and the image's pixel count checked against Pillow's
decompression-bomb limit (``PIL.Image.MAX_IMAGE_PIXELS``) and the decoded size against
:func:`check_allocation` before any pixel data is decoded.  The schema says a file that cannot be
decoded yields an empty tensor; we raise :class:`InvalidArgument` instead (naming the format and
Pillow's reason) so that a corrupt file is not mistaken for an empty image.
"""

from __future__ import annotations

import io
import struct

import numpy as np

from onnxplug.errors import Fail, InvalidArgument
from onnxplug.kernels import check_allocation

from ._registry import kernel

_EXTRA = "pip install 'onnxplug-cpu[image]'"
# What Pillow raises on corrupt data: its parsers use OSError and SyntaxError, some let a struct,
# index or value error through, a truncated stream can end in EOFError.
_CORRUPT = (OSError, SyntaxError, ValueError, EOFError, IndexError, struct.error)


def _pillow():
    """``PIL.Image``, imported when an image is first decoded (Pillow is an optional extra)."""
    try:
        import PIL.Image  # optional dependency, imported only by this op
    except ImportError:
        raise Fail(f"ImageDecoder needs Pillow to decode images: install it with {_EXTRA}") from None
    return PIL.Image


def _open(pil, data: bytes):
    """The image with only its header read, after the size checks."""
    # Pillow warns on an image over its limit and raises over twice the limit; we refuse both (the
    # check below), without warnings.catch_warnings, which is not thread-safe inside a kernel.
    try:
        image = pil.open(io.BytesIO(data))
    except pil.UnidentifiedImageError:
        raise InvalidArgument(f"ImageDecoder: unrecognised or corrupt image (first bytes {data[:8]!r})") from None
    except pil.DecompressionBombError as error:
        raise InvalidArgument(f"ImageDecoder: image refused as a decompression bomb: {error}") from None
    except _CORRUPT as error:
        raise InvalidArgument(f"ImageDecoder: corrupt image header: {error}") from None
    width, height = image.size
    limit = pil.MAX_IMAGE_PIXELS
    if limit is not None and width * height > limit:
        raise InvalidArgument(
            f"ImageDecoder: {image.format} image of {width}x{height} pixels exceeds the decompression-bomb "
            f"limit of {limit} pixels (PIL.Image.MAX_IMAGE_PIXELS)"
        )
    check_allocation((height, width, 3), np.uint8, f"ImageDecoder {image.format} image")
    return image


def _decode(data: bytes, pixel_format: str) -> np.ndarray:
    pil = _pillow()
    image = _open(pil, data)
    name = image.format or "image"
    try:
        image.load()
        converted = image.convert("L" if pixel_format == "Grayscale" else "RGB")
    except (*_CORRUPT, pil.DecompressionBombError) as error:
        raise InvalidArgument(f"ImageDecoder: corrupt {name} image: {error}") from None
    finally:
        image.close()
    pixels = np.asarray(converted, dtype=np.uint8)
    if pixel_format == "Grayscale":
        return np.ascontiguousarray(pixels[..., None])
    return np.ascontiguousarray(pixels[..., ::-1] if pixel_format == "BGR" else pixels)


@kernel("ImageDecoder", since=(20,))
def image_decoder(encoded, *, pixel_format):
    if pixel_format not in ("RGB", "BGR", "Grayscale"):
        raise InvalidArgument(f"ImageDecoder: pixel_format {pixel_format!r} is not RGB, BGR or Grayscale")
    if encoded.dtype != np.uint8 or encoded.ndim != 1:
        raise InvalidArgument(
            f"ImageDecoder: encoded stream must be a 1-D uint8 tensor, "
            f"got {encoded.dtype} of shape {list(encoded.shape)}"
        )
    if encoded.size < 8:
        raise InvalidArgument(f"ImageDecoder: encoded stream of {encoded.size} bytes is too short for an image")
    return _decode(encoded.tobytes(), pixel_format)

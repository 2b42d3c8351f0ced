"""ImageDecoder in numpy and zlib: PNG, BMP, PNM (P1-P6) and TIFF; no image library needed.

Each decoder turns the file into a uint8 ``(H, W, 1)`` grey or ``(H, W, 3)`` RGB array (alpha is
dropped, 16-bit samples keep their high byte, palettes are expanded), then the requested
``pixel_format`` is produced from that.  Grey from colour uses the fixed-point ITU-R 601 luma that
onnx's expected outputs (made with Pillow's ``convert("L")``) follow:
``(19595 R + 38470 G + 7471 B + 32768) >> 16``.

JPEG, JPEG 2000, WebP and GIF are recognised and refused with :class:`Fail`, as are features of
the supported formats that need a sequential bit-level decoder (BMP RLE, TIFF LZW/PackBits/JPEG).
BMP, PNM and TIFF live in :mod:`._image_formats`; PNG, the format dispatch and the op are here.
The schema says a file that cannot be decoded yields an empty tensor; we raise instead, so that a
bad file is not mistaken for an empty image.  Malformed files raise :class:`InvalidArgument`
naming the problem; sizes are checked with :func:`check_allocation` before anything is allocated
from header values, and zlib output is capped at the size the header implies.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

from onnxplug.errors import Fail, InvalidArgument
from onnxplug.kernels import check_allocation, check_terminate

from ._image_formats import (
    check_dims,
    decode_bmp,
    decode_pnm,
    decode_tiff,
    inflate,
    malformed,
    palette_lookup,
    read_struct,
    unpack_bits,
)
from ._registry import kernel

_UNSUPPORTED = (
    (b"\xff\xd8\xff", "JPEG"),
    (b"\x00\x00\x00\x0cjP  \r\n\x87\n", "JPEG 2000"),
    (b"\xff\x4f\xff\x51", "JPEG 2000 (codestream)"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
)


# --- PNG ----------------------------------------------------------------------------------------

_PNG_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


# Below this many bytes per diagonal the numpy sweep's fixed cost per step exceeds a plain byte
# loop over the Average/Paeth rows (thin images would otherwise need one step per pixel).
_SEQUENTIAL_BYTES_PER_STEP = 150


def _png_unfilter_line(kind, line, above, bpp):
    """One Average (3) or Paeth (4) row, byte by byte: each needs the rebuilt byte on its left."""
    out = bytearray(len(line))
    for i, (x, b) in enumerate(zip(line, above)):
        a, c = (out[i - bpp], above[i - bpp]) if i >= bpp else (0, 0)
        if kind == 3:
            out[i] = (x + ((a + b) >> 1)) & 255
        else:
            pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
            out[i] = (x + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    return out


def _png_unfilter_rows(ftypes, rows, bpp):
    """Row by row, for small or thin images; the other filters are vectorised within the row."""
    out = np.empty_like(rows)
    above = np.zeros(rows.shape[1], np.uint8)
    for y, kind in enumerate(ftypes.tolist()):
        check_terminate()
        if kind == 0:
            out[y] = rows[y]
        elif kind == 1:
            out[y] = np.cumsum(rows[y].reshape(-1, bpp), axis=0, dtype=np.uint8).ravel()
        elif kind == 2:
            out[y] = rows[y] + above
        else:
            out[y] = np.frombuffer(_png_unfilter_line(kind, rows[y].tolist(), above.tolist(), bpp), np.uint8)
        above = out[y]
    return out


def _png_unfilter(ftypes, rows, bpp):
    """Undo the per-row filters of one (sub)image: ``rows`` is ``(H, rowbytes)`` uint8."""
    if ftypes.size and int(ftypes.max()) > 4:
        raise malformed("PNG", f"unknown row filter type {int(ftypes.max())}")
    height, nbytes = rows.shape
    npix = nbytes // bpp
    if not np.isin(ftypes, (3, 4)).any():
        # None/Sub rows stand alone (Sub is a running sum along the row); a run of Up rows is a
        # running sum down the columns from the last non-Up row.  uint8 sums wrap mod 256.
        out = rows.reshape(height, npix, bpp).copy()
        sub = ftypes == 1
        out[sub] = np.cumsum(out[sub], axis=1, dtype=np.uint8)
        total = np.cumsum(out, axis=0, dtype=np.uint8)
        start = np.maximum.accumulate(np.where(ftypes != 2, np.arange(height), 0))
        before = np.concatenate([np.zeros((1, npix, bpp), np.uint8), total])[start]
        return (total - before).reshape(height, nbytes)
    if height * nbytes < _SEQUENTIAL_BYTES_PER_STEP * (height + npix):
        return _png_unfilter_rows(ftypes, rows, bpp)
    # Average and Paeth depend on the reconstructed left, upper and upper-left neighbours, so the
    # pixels of one anti-diagonal are independent: sweep the H + W - 1 diagonals.  In a padded
    # (H+1, W+1) grid a diagonal is a stride-W slice of the flattened array, so every step is views.
    grid = np.zeros(((height + 1) * (npix + 1), bpp), np.int16)
    raw = np.zeros_like(grid)
    raw.reshape(height + 1, npix + 1, bpp)[1:, 1:] = rows.reshape(height, npix, bpp)
    for diag in range(height + npix - 1):
        check_terminate()
        y0, y1 = max(0, diag - npix + 1), min(height - 1, diag)
        first = (y0 + 1) * (npix + 1) + diag - y0 + 1
        span = slice(first, first + (y1 - y0) * npix + 1, npix)
        left = grid[first - 1 : span.stop - 1 : npix]
        up = grid[first - npix - 1 : span.stop - npix - 1 : npix]
        corner = grid[first - npix - 2 : span.stop - npix - 2 : npix]
        kind = ftypes[y0 : y1 + 1, None]
        pa, pb, pc = np.abs(up - corner), np.abs(left - corner), np.abs(left + up - 2 * corner)
        paeth = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, up, corner))
        pred = np.select([kind == 1, kind == 2, kind == 3, kind == 4], [left, up, (left + up) >> 1, paeth], 0)
        grid[span] = (raw[span] + pred) & 255
    return grid.reshape(height + 1, npix + 1, bpp)[1:, 1:].astype(np.uint8).reshape(height, nbytes)


def _png_samples(rows, width, color, depth, palette):
    """Unfiltered rows of one (sub)image -> ``(H, W, 1|3)`` uint8."""
    channels = _PNG_CHANNELS[color]
    if depth == 16:
        values = rows[:, : width * channels * 2].reshape(len(rows), width, channels, 2)[..., 0]
    else:
        values = unpack_bits(rows, width * channels, depth).reshape(len(rows), width, channels)
    if color == 3:
        return palette_lookup("PNG", palette, values[..., 0])
    if color == 0 and depth < 8:
        values = values * np.uint8(255 // ((1 << depth) - 1))
    return np.ascontiguousarray(values[..., :3] if color == 6 else values[..., :1] if color == 4 else values)


def _decode_png(data):
    header, palette, idat, pos = None, None, [], 8
    while True:
        length, ctype = read_struct("PNG", ">I4s", data, pos)
        end = pos + 12 + length
        if end > len(data):
            raise malformed("PNG", f"chunk {ctype!r} at offset {pos} runs past the end of the file")
        body = data[pos + 8 : end - 4]
        critical = ctype[:1].isupper()
        if critical and zlib.crc32(data[pos + 4 : end - 4]) != struct.unpack_from(">I", data, end - 4)[0]:
            raise malformed("PNG", f"CRC mismatch in chunk {ctype!r}")
        if ctype == b"IHDR" and len(body) == 13:
            header = struct.unpack(">IIBBBBB", body)
        elif ctype == b"PLTE":
            if len(body) % 3 or not 0 < len(body) <= 768:
                raise malformed("PNG", f"PLTE chunk of {len(body)} bytes")
            palette = np.frombuffer(body, np.uint8).reshape(-1, 3)
        elif ctype == b"IDAT":
            idat.append(body)
        elif ctype == b"IEND":
            break
        elif critical:
            raise malformed("PNG", f"unexpected critical chunk {ctype!r}")
        pos = end
    if header is None:
        raise malformed("PNG", "missing or malformed IHDR chunk")
    width, height, depth, color, compression, filtering, interlace = header
    if color not in _PNG_DEPTHS or depth not in _PNG_DEPTHS[color]:
        raise malformed("PNG", f"colour type {color} with bit depth {depth}")
    if compression or filtering or interlace > 1:
        raise malformed("PNG", f"compression {compression}, filter {filtering}, interlace {interlace}")
    if color == 3 and palette is None:
        raise malformed("PNG", "palette image without a PLTE chunk")
    if width > 2**31 - 1 or height > 2**31 - 1:
        raise malformed("PNG", f"image size {width}x{height} exceeds 2^31-1")
    check_dims("PNG", width, height)
    bits = _PNG_CHANNELS[color] * depth
    bpp = max(1, bits // 8)
    passes = []
    for x0, y0, dx, dy in _ADAM7 if interlace else ((0, 0, 1, 1),):
        pw, ph = (width - x0 + dx - 1) // dx, (height - y0 + dy - 1) // dy
        if pw and ph:
            passes.append((x0, y0, dx, dy, pw, ph, (pw * bits + 7) // 8))
    size = sum(ph * (rowbytes + 1) for *_, ph, rowbytes in passes)
    check_allocation((size,), np.uint8, "ImageDecoder PNG image data")
    raw = np.frombuffer(inflate("PNG", b"".join(idat), size), np.uint8)
    image = np.empty((height, width, 3 if color in (2, 3, 6) else 1), np.uint8)
    offset = 0
    for x0, y0, dx, dy, pw, ph, rowbytes in passes:
        block = raw[offset : offset + ph * (rowbytes + 1)].reshape(ph, rowbytes + 1)
        offset += block.size
        rows = _png_unfilter(block[:, 0], block[:, 1:], bpp)
        image[y0::dy, x0::dx] = _png_samples(rows, pw, color, depth, palette)
    return image


# --- the op -------------------------------------------------------------------------------------


def _decode(data):
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return _decode_png(data)
    if data[:2] == b"BM":
        return decode_bmp(data)
    if data[:1] == b"P" and data[1:2] in b"123456" and len(data) > 2 and data[2:3].isspace():
        return decode_pnm(data)
    if data[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):
        return decode_tiff(data)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        raise Fail("ImageDecoder: WebP images are not supported (no WebP decoder without an image library)")
    for magic, name in _UNSUPPORTED:
        if data.startswith(magic):
            raise Fail(
                f"ImageDecoder: {name} images are not supported (no {name} decoder without an "
                "image library); supported formats are PNG, BMP, PNM (P1-P6) and TIFF"
            )
    raise InvalidArgument(
        f"ImageDecoder: unrecognised image format (first bytes {data[:8]!r}); "
        "supported formats are PNG, BMP, PNM (P1-P6) and TIFF"
    )


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
    image = _decode(encoded.tobytes())
    if pixel_format == "Grayscale":
        if image.shape[2] == 3:
            wide = image.astype(np.uint32)
            luma = (wide[..., 0] * 19595 + wide[..., 1] * 38470 + wide[..., 2] * 7471 + 32768) >> 16
            return luma.astype(np.uint8)[..., None]
        return np.ascontiguousarray(image)
    if image.shape[2] == 1:
        image = np.repeat(image, 3, axis=2)
    return np.ascontiguousarray(image[..., ::-1] if pixel_format == "BGR" else image)

"""BMP, PNM and TIFF decoding for ImageDecoder (see :mod:`.image_decode`), plus the helpers the
PNG decoder shares: bounds-checked header reads, capped zlib inflation, allocation checks, bit
unpacking and palette lookup.

Each decoder returns a uint8 ``(H, W, 1)`` grey or ``(H, W, 3)`` RGB array.  Header values are
checked against the file size before anything is sliced, and image sizes go through
:func:`check_allocation` before anything is allocated.
"""

from __future__ import annotations

import re
import struct
import zlib

import numpy as np

from onnxplug.errors import Fail, InvalidArgument
from onnxplug.kernels import check_allocation


def malformed(fmt, what):
    return InvalidArgument(f"ImageDecoder: malformed {fmt} file: {what}")


def read_struct(fmt, layout, data, offset):
    try:
        return struct.unpack_from(layout, data, offset)
    except struct.error:
        raise malformed(
            fmt, f"truncated header (need {struct.calcsize(layout)} bytes at offset {offset}, file has {len(data)})"
        ) from None


def inflate(fmt, stream, size):
    """Decompress a zlib stream to exactly ``size`` bytes, never producing more."""
    try:
        out = zlib.decompressobj().decompress(stream, size)
    except zlib.error as err:
        raise malformed(fmt, f"corrupt compressed data ({err})") from None
    if len(out) < size:
        raise malformed(fmt, f"image data is truncated: {len(out)} bytes decompressed, {size} expected")
    return out


def check_dims(fmt, width, height, channels=3):
    if width <= 0 or height <= 0:
        raise malformed(fmt, f"image size {width}x{height} is not positive")
    check_allocation((height, width, channels), np.uint8, f"ImageDecoder {fmt} image")


def unpack_bits(rows, count, depth):
    """``(H, bytes)`` uint8 rows -> ``(H, count)`` values of ``depth`` bits (1, 2, 4 or 8)."""
    if depth == 8:
        return rows[:, :count]
    bits = np.unpackbits(rows, axis=1)[:, : count * depth].reshape(rows.shape[0], count, depth)
    weights = (1 << np.arange(depth - 1, -1, -1)).astype(np.uint8)
    return (bits * weights).sum(axis=2, dtype=np.uint8)


def palette_lookup(fmt, palette, indices):
    if indices.size and int(indices.max()) >= len(palette):
        raise malformed(fmt, f"pixel uses colour index {int(indices.max())} but the palette has {len(palette)} entries")
    return palette[indices]


# --- BMP ----------------------------------------------------------------------------------------


def _mask_channel(values, mask):
    """Extract one bitfield channel and stretch it to 0..255."""
    if not mask:
        return np.zeros(values.shape, np.uint8)
    shift = (mask & -mask).bit_length() - 1
    top = mask >> shift
    return (((values.astype(np.uint64) >> shift) & top) * 255 + top // 2) // top


def decode_bmp(data):
    (pixel_offset,) = read_struct("BMP", "<I", data, 10)
    (info,) = read_struct("BMP", "<I", data, 14)
    if info == 12:
        width, height, _, bpc = read_struct("BMP", "<HHHH", data, 18)
        compression, colors, entry = 0, 0, 3
    elif info in (40, 52, 56, 64, 108, 124):
        width, height, _, bpc, compression = read_struct("BMP", "<iiHHI", data, 18)
        (colors,) = read_struct("BMP", "<I", data, 46)
        entry = 4
    else:
        raise Fail(f"ImageDecoder: BMP with a {info}-byte info header is not supported")
    top_down, height = height < 0, abs(height)
    if compression not in (0, 3, 6):
        name = {1: "RLE8", 2: "RLE4", 4: "embedded JPEG", 5: "embedded PNG"}.get(compression, str(compression))
        raise Fail(f"ImageDecoder: BMP compression {name} is not supported")
    if bpc not in (1, 4, 8, 16, 24, 32) or (compression and bpc not in (16, 32)):
        raise malformed("BMP", f"{bpc} bits per pixel with compression {compression}")
    check_dims("BMP", width, height)
    stride = (bpc * width + 31) // 32 * 4
    if pixel_offset + stride * height > len(data):
        raise malformed(
            "BMP", f"pixel data needs {stride * height} bytes at offset {pixel_offset}, file has {len(data)}"
        )
    rows = np.frombuffer(data, np.uint8, stride * height, pixel_offset).reshape(height, stride)
    if not top_down:
        rows = rows[::-1]
    if bpc <= 8:
        count = colors or 1 << bpc
        start = 14 + info
        if count > 1 << bpc or start + count * entry > pixel_offset:
            raise malformed("BMP", f"palette of {count} entries does not fit before the pixel data")
        palette = np.frombuffer(data, np.uint8, count * entry, start).reshape(count, entry)[:, 2::-1]
        return palette_lookup("BMP", palette, unpack_bits(rows, width, bpc))
    if bpc == 24:
        return rows[:, : width * 3].reshape(height, width, 3)[..., ::-1]
    if compression == 0:
        if bpc == 32:
            return rows[:, : width * 4].reshape(height, width, 4)[..., 2::-1]
        masks = (0x7C00, 0x03E0, 0x001F)
    else:
        masks = read_struct("BMP", "<III", data, 54 if info > 40 else 14 + info)
    values = rows[:, : width * bpc // 8].copy().view("<u2" if bpc == 16 else "<u4")
    return np.stack([_mask_channel(values, m) for m in masks], axis=-1).astype(np.uint8)


# --- PNM ----------------------------------------------------------------------------------------

# A comment must run to the end of its line, so the pattern has one parse and cannot backtrack
# exponentially on hostile headers.
_PNM_TOKEN = re.compile(rb"(?:\s|#[^\r\n]*(?![^\r\n]))*(\d{1,10})(?!\d)")


def decode_pnm(data):
    kind = data[1] - ord("0")
    pos, fields = 2, []
    for _ in range(2 if kind in (1, 4) else 3):
        match = _PNM_TOKEN.match(data, pos)
        if match is None:
            raise malformed("PNM", f"expected a header number at offset {pos}")
        fields.append(int(match.group(1)))
        pos = match.end()
    width, height, maxval = fields + [1] * (3 - len(fields))
    if not 0 < maxval < 65536:
        raise malformed("PNM", f"maximum value {maxval} is outside 1..65535")
    channels = 3 if kind in (3, 6) else 1
    check_dims("PNM", width, height)
    count = width * height * channels
    if kind in (1, 2, 3):
        text = re.sub(rb"#[^\r\n]*", b" ", data[pos:])
        if kind == 1:
            text = bytes(text.translate(None, b" \t\r\n\v\f"))
            values = np.frombuffer(text, np.uint8)[:count] - np.uint8(ord("0"))
        else:
            words = text.split(None, count)[:count]
            try:
                values = np.array(words, dtype=np.int64) if words else np.zeros(0, np.int64)
            except (ValueError, OverflowError):
                raise malformed("PNM", "sample that is not a decimal number") from None
        if values.size < count:
            raise malformed("PNM", f"{values.size} samples, {count} expected")
    else:
        if pos >= len(data) or not data[pos : pos + 1].isspace():
            raise malformed("PNM", "header not followed by whitespace")
        pos += 1
        if kind == 4:
            rowbytes = (width + 7) // 8
            if pos + rowbytes * height > len(data):
                raise malformed("PNM", f"pixel data truncated: {len(data) - pos} bytes, {rowbytes * height} expected")
            rows = np.frombuffer(data, np.uint8, rowbytes * height, pos).reshape(height, rowbytes)
            values = unpack_bits(rows, width, 1)
        else:
            dtype = np.dtype(np.uint8 if maxval < 256 else ">u2")
            if pos + count * dtype.itemsize > len(data):
                raise malformed(
                    "PNM", f"pixel data truncated: {len(data) - pos} bytes, {count * dtype.itemsize} expected"
                )
            values = np.frombuffer(data, dtype, count, pos)
    if int(values.max()) > maxval or int(values.min()) < 0:
        raise malformed("PNM", f"sample outside 0..{maxval}")
    if kind in (1, 4):
        values = (1 - values) * 255  # 1 is black
    elif maxval != 255:
        values = (values.astype(np.int64) * 255 + maxval // 2) // maxval
    return values.astype(np.uint8).reshape(height, width, channels)


# --- TIFF ---------------------------------------------------------------------------------------

_TIFF_SIZES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8, 13: 4}
_TIFF_INTS = {1: "u1", 3: "u2", 4: "u4", 6: "i1", 8: "i2", 9: "i4", 13: "u4"}
_TIFF_COMPRESSION = {2: "CCITT", 3: "CCITT G3", 4: "CCITT G4", 5: "LZW", 6: "old JPEG", 7: "JPEG", 32773: "PackBits"}


def _tiff_tags(data, order):
    (offset,) = read_struct("TIFF", order + "I", data, 4)
    (count,) = read_struct("TIFF", order + "H", data, offset)
    if offset + 2 + 12 * count > len(data):
        raise malformed("TIFF", f"directory of {count} entries at offset {offset} runs past the end")
    tags = {}
    for index in range(count):
        tag, typ, n = struct.unpack_from(order + "HHI", data, offset + 2 + 12 * index)
        if typ not in _TIFF_INTS:
            continue
        size = n * _TIFF_SIZES[typ]
        start = offset + 10 + 12 * index
        if size > 4:
            (start,) = struct.unpack_from(order + "I", data, start)
        if start + size > len(data):
            raise malformed("TIFF", f"value of tag {tag} runs past the end of the file")
        tags[tag] = np.frombuffer(data, order + _TIFF_INTS[typ], n, start).astype(np.int64)
    return tags


def decode_tiff(data):
    order = "<" if data[:2] == b"II" else ">"
    (magic,) = read_struct("TIFF", order + "H", data, 2)
    if magic != 42:
        raise Fail(f"ImageDecoder: TIFF variant {magic} (BigTIFF is 43) is not supported")
    tags = _tiff_tags(data, order)

    def get(tag, default=None):
        if tag in tags and tags[tag].size:
            return int(tags[tag][0])
        if default is None:
            raise malformed("TIFF", f"required tag {tag} is missing")
        return default

    if 322 in tags:
        raise Fail("ImageDecoder: tiled TIFF is not supported (only strips)")
    width, height, photometric = get(256), get(257), get(262)
    spp, compression, planar, predictor = get(277, 1), get(259, 1), get(284, 1), get(317, 1)
    bps = tags.get(258, np.array([1]))
    depth = int(bps[0])
    if compression not in (1, 8, 32946):
        name = _TIFF_COMPRESSION.get(compression, str(compression))
        raise Fail(f"ImageDecoder: TIFF compression {name} is not supported")
    if photometric not in (0, 1, 2, 3):
        raise Fail(f"ImageDecoder: TIFF photometric interpretation {photometric} is not supported")
    usable = (8, 16) if photometric == 2 else (1, 2, 4, 8) if photometric == 3 else (1, 2, 4, 8, 16)
    if np.any(bps != depth) or depth not in usable or spp < (3 if photometric == 2 else 1):
        raise malformed("TIFF", f"bits per sample {bps.tolist()} with {spp} samples, photometric {photometric}")
    if predictor not in (1, 2) or (predictor == 2 and depth < 8):
        raise Fail(f"ImageDecoder: TIFF predictor {predictor} with {depth}-bit samples is not supported")
    check_dims("TIFF", width, height, max(spp, 3))
    if planar not in (1, 2) or get(278, 1) < 0:
        raise malformed("TIFF", f"planar configuration {planar}, rows per strip {get(278, 1)}")
    planes, per_pixel = (spp, 1) if planar == 2 else (1, spp)
    rowbytes = (width * per_pixel * depth + 7) // 8
    rows_per_strip = min(get(278, height), height) or height
    strips = -(-height // rows_per_strip)
    offsets = tags.get(273, np.zeros(0, np.int64))
    rows_in = np.minimum(rows_per_strip, height - np.arange(strips) * rows_per_strip)
    counts = tags.get(279, np.tile(rows_in * rowbytes, planes))
    if offsets.size != strips * planes or counts.size != offsets.size:
        raise malformed(
            "TIFF", f"{offsets.size} strip offsets and {counts.size} byte counts, {strips * planes} strips expected"
        )
    check_allocation((planes, height, rowbytes), np.uint8, "ImageDecoder TIFF image data")
    chunks = []
    for index, (start, size) in enumerate(zip(offsets.tolist(), counts.tolist())):
        rows = int(rows_in[index % strips])
        if start < 0 or size < 0 or start + size > len(data):
            raise malformed("TIFF", f"strip {index} ({size} bytes at offset {start}) runs past the end of the file")
        strip = data[start : start + size]
        if compression != 1:
            strip = inflate("TIFF", strip, rows * rowbytes)
        elif len(strip) < rows * rowbytes:
            raise malformed("TIFF", f"strip {index} has {len(strip)} bytes, {rows * rowbytes} expected")
        chunks.append(np.frombuffer(strip, np.uint8, rows * rowbytes).reshape(rows, rowbytes))
    planes_rows = np.concatenate(chunks).reshape(planes, height, rowbytes)
    if depth == 16:
        samples = planes_rows.view(order + "u2").reshape(planes, height, width, per_pixel)
    else:
        samples = unpack_bits(planes_rows.reshape(-1, rowbytes), width * per_pixel, depth)
        samples = samples.reshape(planes, height, width, per_pixel)
    if predictor == 2:
        samples = np.cumsum(samples, axis=2, dtype=samples.dtype)
    samples = np.moveaxis(samples, 0, -1).reshape(height, width, spp)
    if depth == 16:
        samples = (samples >> 8).astype(np.uint8)
    if photometric == 3:
        colormap = tags.get(320)
        if colormap is None or colormap.size != 3 << depth:
            raise malformed("TIFF", "palette image without a colour map of 3 * 2^bits entries")
        palette = (colormap.reshape(3, -1).T >> 8).astype(np.uint8)
        return palette_lookup("TIFF", palette, samples[..., 0])
    if photometric == 2:
        return samples[..., :3]
    grey = samples[..., :1] * np.uint8(255 // ((1 << min(depth, 8)) - 1))
    return 255 - grey if photometric == 0 else grey

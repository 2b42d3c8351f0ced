"""ImageDecoder in numpy and zlib: PNG, BMP, PNM (P1-P6) and TIFF; no image library needed.

Each decoder turns the file into a uint8 ``(H, W, 1)`` grey or ``(H, W, 3)`` RGB array (alpha is
dropped, 16-bit samples keep their high byte, palettes are expanded), then the requested
``pixel_format`` is produced from that.  Grey from colour uses the fixed-point ITU-R 601 luma that
onnx's expected outputs (made with Pillow's ``convert("L")``) follow:
``(19595 R + 38470 G + 7471 B + 32768) >> 16``.

JPEG, JPEG 2000, WebP and GIF are recognised and refused with :class:`Fail`, as are features of
the supported formats that need a sequential bit-level decoder (BMP RLE, TIFF LZW/PackBits/JPEG).
The schema says a file that cannot be decoded yields an empty tensor; we raise instead, so that a
bad file is not mistaken for an empty image.  Malformed files raise :class:`InvalidArgument`
naming the problem; sizes are checked with :func:`check_allocation` before anything is allocated
from header values, and zlib output is capped at the size the header implies.
"""

from __future__ import annotations

import re
import struct
import zlib

import numpy as np

from onnxplug.errors import Fail, InvalidArgument
from onnxplug.kernels import check_allocation, check_terminate

from ._registry import kernel

_UNSUPPORTED = (
    (b"\xff\xd8\xff", "JPEG"),
    (b"\x00\x00\x00\x0cjP  \r\n\x87\n", "JPEG 2000"),
    (b"\xff\x4f\xff\x51", "JPEG 2000 (codestream)"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
)


def _bad(fmt, what):
    return InvalidArgument(f"ImageDecoder: malformed {fmt} file: {what}")


def _unpack(fmt, layout, data, offset):
    try:
        return struct.unpack_from(layout, data, offset)
    except struct.error:
        raise _bad(fmt, f"truncated header (need {struct.calcsize(layout)} bytes at offset {offset}, "
                        f"file has {len(data)})") from None


def _inflate(fmt, stream, size):
    """Decompress a zlib stream to exactly ``size`` bytes, never producing more."""
    try:
        out = zlib.decompressobj().decompress(stream, size)
    except zlib.error as err:
        raise _bad(fmt, f"corrupt compressed data ({err})") from None
    if len(out) < size:
        raise _bad(fmt, f"image data is truncated: {len(out)} bytes decompressed, {size} expected")
    return out


def _check_dims(fmt, width, height, channels=3):
    if width <= 0 or height <= 0:
        raise _bad(fmt, f"image size {width}x{height} is not positive")
    check_allocation((height, width, channels), np.uint8, f"ImageDecoder {fmt} image")


def _unpack_bits(rows, count, depth):
    """``(H, bytes)`` uint8 rows -> ``(H, count)`` values of ``depth`` bits (1, 2, 4 or 8)."""
    if depth == 8:
        return rows[:, :count]
    bits = np.unpackbits(rows, axis=1)[:, : count * depth].reshape(rows.shape[0], count, depth)
    weights = (1 << np.arange(depth - 1, -1, -1)).astype(np.uint8)
    return (bits * weights).sum(axis=2, dtype=np.uint8)


def _lookup(fmt, palette, indices):
    if indices.size and int(indices.max()) >= len(palette):
        raise _bad(fmt, f"pixel uses colour index {int(indices.max())} but the palette has {len(palette)} entries")
    return palette[indices]


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
        raise _bad("PNG", f"unknown row filter type {int(ftypes.max())}")
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
        values = _unpack_bits(rows, width * channels, depth).reshape(len(rows), width, channels)
    if color == 3:
        return _lookup("PNG", palette, values[..., 0])
    if color == 0 and depth < 8:
        values = values * np.uint8(255 // ((1 << depth) - 1))
    return np.ascontiguousarray(values[..., :3] if color == 6 else values[..., :1] if color == 4 else values)


def _decode_png(data):
    header, palette, idat, pos = None, None, [], 8
    while True:
        length, ctype = _unpack("PNG", ">I4s", data, pos)
        end = pos + 12 + length
        if end > len(data):
            raise _bad("PNG", f"chunk {ctype!r} at offset {pos} runs past the end of the file")
        body = data[pos + 8 : end - 4]
        critical = ctype[:1].isupper()
        if critical and zlib.crc32(data[pos + 4 : end - 4]) != struct.unpack_from(">I", data, end - 4)[0]:
            raise _bad("PNG", f"CRC mismatch in chunk {ctype!r}")
        if ctype == b"IHDR" and len(body) == 13:
            header = struct.unpack(">IIBBBBB", body)
        elif ctype == b"PLTE":
            if len(body) % 3 or not 0 < len(body) <= 768:
                raise _bad("PNG", f"PLTE chunk of {len(body)} bytes")
            palette = np.frombuffer(body, np.uint8).reshape(-1, 3)
        elif ctype == b"IDAT":
            idat.append(body)
        elif ctype == b"IEND":
            break
        elif critical:
            raise _bad("PNG", f"unexpected critical chunk {ctype!r}")
        pos = end
    if header is None:
        raise _bad("PNG", "missing or malformed IHDR chunk")
    width, height, depth, color, compression, filtering, interlace = header
    if color not in _PNG_DEPTHS or depth not in _PNG_DEPTHS[color]:
        raise _bad("PNG", f"colour type {color} with bit depth {depth}")
    if compression or filtering or interlace > 1:
        raise _bad("PNG", f"compression {compression}, filter {filtering}, interlace {interlace}")
    if color == 3 and palette is None:
        raise _bad("PNG", "palette image without a PLTE chunk")
    if width > 2**31 - 1 or height > 2**31 - 1:
        raise _bad("PNG", f"image size {width}x{height} exceeds 2^31-1")
    _check_dims("PNG", width, height)
    bits = _PNG_CHANNELS[color] * depth
    bpp = max(1, bits // 8)
    passes = []
    for x0, y0, dx, dy in _ADAM7 if interlace else ((0, 0, 1, 1),):
        pw, ph = (width - x0 + dx - 1) // dx, (height - y0 + dy - 1) // dy
        if pw and ph:
            passes.append((x0, y0, dx, dy, pw, ph, (pw * bits + 7) // 8))
    size = sum(ph * (rowbytes + 1) for *_, ph, rowbytes in passes)
    check_allocation((size,), np.uint8, "ImageDecoder PNG image data")
    raw = np.frombuffer(_inflate("PNG", b"".join(idat), size), np.uint8)
    image = np.empty((height, width, 3 if color in (2, 3, 6) else 1), np.uint8)
    offset = 0
    for x0, y0, dx, dy, pw, ph, rowbytes in passes:
        block = raw[offset : offset + ph * (rowbytes + 1)].reshape(ph, rowbytes + 1)
        offset += block.size
        rows = _png_unfilter(block[:, 0], block[:, 1:], bpp)
        image[y0::dy, x0::dx] = _png_samples(rows, pw, color, depth, palette)
    return image


# --- BMP ----------------------------------------------------------------------------------------


def _mask_channel(values, mask):
    """Extract one bitfield channel and stretch it to 0..255."""
    if not mask:
        return np.zeros(values.shape, np.uint8)
    shift = (mask & -mask).bit_length() - 1
    top = mask >> shift
    return (((values.astype(np.uint64) >> shift) & top) * 255 + top // 2) // top


def _decode_bmp(data):
    (pixel_offset,) = _unpack("BMP", "<I", data, 10)
    (info,) = _unpack("BMP", "<I", data, 14)
    if info == 12:
        width, height, _, bpc = _unpack("BMP", "<HHHH", data, 18)
        compression, colors, entry = 0, 0, 3
    elif info in (40, 52, 56, 64, 108, 124):
        width, height, _, bpc, compression = _unpack("BMP", "<iiHHI", data, 18)
        (colors,) = _unpack("BMP", "<I", data, 46)
        entry = 4
    else:
        raise Fail(f"ImageDecoder: BMP with a {info}-byte info header is not supported")
    top_down, height = height < 0, abs(height)
    if compression not in (0, 3, 6):
        name = {1: "RLE8", 2: "RLE4", 4: "embedded JPEG", 5: "embedded PNG"}.get(compression, str(compression))
        raise Fail(f"ImageDecoder: BMP compression {name} is not supported")
    if bpc not in (1, 4, 8, 16, 24, 32) or (compression and bpc not in (16, 32)):
        raise _bad("BMP", f"{bpc} bits per pixel with compression {compression}")
    _check_dims("BMP", width, height)
    stride = (bpc * width + 31) // 32 * 4
    if pixel_offset + stride * height > len(data):
        raise _bad("BMP", f"pixel data needs {stride * height} bytes at offset {pixel_offset}, "
                          f"file has {len(data)}")
    rows = np.frombuffer(data, np.uint8, stride * height, pixel_offset).reshape(height, stride)
    if not top_down:
        rows = rows[::-1]
    if bpc <= 8:
        count = colors or 1 << bpc
        start = 14 + info
        if count > 1 << bpc or start + count * entry > pixel_offset:
            raise _bad("BMP", f"palette of {count} entries does not fit before the pixel data")
        palette = np.frombuffer(data, np.uint8, count * entry, start).reshape(count, entry)[:, 2::-1]
        return _lookup("BMP", palette, _unpack_bits(rows, width, bpc))
    if bpc == 24:
        return rows[:, : width * 3].reshape(height, width, 3)[..., ::-1]
    if compression == 0:
        if bpc == 32:
            return rows[:, : width * 4].reshape(height, width, 4)[..., 2::-1]
        masks = (0x7C00, 0x03E0, 0x001F)
    else:
        masks = _unpack("BMP", "<III", data, 54 if info > 40 else 14 + info)
    values = rows[:, : width * bpc // 8].copy().view("<u2" if bpc == 16 else "<u4")
    return np.stack([_mask_channel(values, m) for m in masks], axis=-1).astype(np.uint8)


# --- PNM ----------------------------------------------------------------------------------------

# A comment must run to the end of its line, so the pattern has one parse and cannot backtrack
# exponentially on hostile headers.
_PNM_TOKEN = re.compile(rb"(?:\s|#[^\r\n]*(?![^\r\n]))*(\d{1,10})(?!\d)")


def _decode_pnm(data):
    kind = data[1] - ord("0")
    pos, fields = 2, []
    for _ in range(2 if kind in (1, 4) else 3):
        match = _PNM_TOKEN.match(data, pos)
        if match is None:
            raise _bad("PNM", f"expected a header number at offset {pos}")
        fields.append(int(match.group(1)))
        pos = match.end()
    width, height, maxval = fields + [1] * (3 - len(fields))
    if not 0 < maxval < 65536:
        raise _bad("PNM", f"maximum value {maxval} is outside 1..65535")
    channels = 3 if kind in (3, 6) else 1
    _check_dims("PNM", width, height)
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
                raise _bad("PNM", "sample that is not a decimal number") from None
        if values.size < count:
            raise _bad("PNM", f"{values.size} samples, {count} expected")
    else:
        if pos >= len(data) or not data[pos : pos + 1].isspace():
            raise _bad("PNM", "header not followed by whitespace")
        pos += 1
        if kind == 4:
            rowbytes = (width + 7) // 8
            if pos + rowbytes * height > len(data):
                raise _bad("PNM", f"pixel data truncated: {len(data) - pos} bytes, {rowbytes * height} expected")
            rows = np.frombuffer(data, np.uint8, rowbytes * height, pos).reshape(height, rowbytes)
            values = _unpack_bits(rows, width, 1)
        else:
            dtype = np.dtype(np.uint8 if maxval < 256 else ">u2")
            if pos + count * dtype.itemsize > len(data):
                raise _bad("PNM", f"pixel data truncated: {len(data) - pos} bytes, "
                                  f"{count * dtype.itemsize} expected")
            values = np.frombuffer(data, dtype, count, pos)
    if int(values.max()) > maxval or int(values.min()) < 0:
        raise _bad("PNM", f"sample outside 0..{maxval}")
    if kind in (1, 4):
        values = (1 - values) * 255  # 1 is black
    elif maxval != 255:
        values = (values.astype(np.int64) * 255 + maxval // 2) // maxval
    return values.astype(np.uint8).reshape(height, width, channels)


# --- TIFF ---------------------------------------------------------------------------------------

_TIFF_SIZES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8, 13: 4}
_TIFF_INTS = {1: "u1", 3: "u2", 4: "u4", 6: "i1", 8: "i2", 9: "i4", 13: "u4"}
_TIFF_COMPRESSION = {2: "CCITT", 3: "CCITT G3", 4: "CCITT G4", 5: "LZW", 6: "old JPEG", 7: "JPEG",
                     32773: "PackBits"}


def _tiff_tags(data, order):
    (offset,) = _unpack("TIFF", order + "I", data, 4)
    (count,) = _unpack("TIFF", order + "H", data, offset)
    if offset + 2 + 12 * count > len(data):
        raise _bad("TIFF", f"directory of {count} entries at offset {offset} runs past the end")
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
            raise _bad("TIFF", f"value of tag {tag} runs past the end of the file")
        tags[tag] = np.frombuffer(data, order + _TIFF_INTS[typ], n, start).astype(np.int64)
    return tags


def _decode_tiff(data):
    order = "<" if data[:2] == b"II" else ">"
    (magic,) = _unpack("TIFF", order + "H", data, 2)
    if magic != 42:
        raise Fail(f"ImageDecoder: TIFF variant {magic} (BigTIFF is 43) is not supported")
    tags = _tiff_tags(data, order)

    def get(tag, default=None):
        if tag in tags and tags[tag].size:
            return int(tags[tag][0])
        if default is None:
            raise _bad("TIFF", f"required tag {tag} is missing")
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
        raise _bad("TIFF", f"bits per sample {bps.tolist()} with {spp} samples, photometric {photometric}")
    if predictor not in (1, 2) or (predictor == 2 and depth < 8):
        raise Fail(f"ImageDecoder: TIFF predictor {predictor} with {depth}-bit samples is not supported")
    _check_dims("TIFF", width, height, max(spp, 3))
    planes, per_pixel = (spp, 1) if planar == 2 else (1, spp)
    rowbytes = (width * per_pixel * depth + 7) // 8
    rows_per_strip = min(get(278, height), height) or height
    strips = -(-height // rows_per_strip)
    offsets = tags.get(273, np.zeros(0, np.int64))
    rows_in = np.minimum(rows_per_strip, height - np.arange(strips) * rows_per_strip)
    counts = tags.get(279, np.tile(rows_in * rowbytes, planes))
    if offsets.size != strips * planes or counts.size != offsets.size:
        raise _bad("TIFF", f"{offsets.size} strip offsets and {counts.size} byte counts, "
                           f"{strips * planes} strips expected")
    check_allocation((planes, height, rowbytes), np.uint8, "ImageDecoder TIFF image data")
    chunks = []
    for index, (start, size) in enumerate(zip(offsets.tolist(), counts.tolist())):
        rows = int(rows_in[index % strips])
        if start < 0 or size < 0 or start + size > len(data):
            raise _bad("TIFF", f"strip {index} ({size} bytes at offset {start}) runs past the end of the file")
        strip = data[start : start + size]
        if compression != 1:
            strip = _inflate("TIFF", strip, rows * rowbytes)
        elif len(strip) < rows * rowbytes:
            raise _bad("TIFF", f"strip {index} has {len(strip)} bytes, {rows * rowbytes} expected")
        chunks.append(np.frombuffer(strip, np.uint8, rows * rowbytes).reshape(rows, rowbytes))
    planes_rows = np.concatenate(chunks).reshape(planes, height, rowbytes)
    if depth == 16:
        samples = planes_rows.view(order + "u2").reshape(planes, height, width, per_pixel)
    else:
        samples = _unpack_bits(planes_rows.reshape(-1, rowbytes), width * per_pixel, depth)
        samples = samples.reshape(planes, height, width, per_pixel)
    if predictor == 2:
        samples = np.cumsum(samples, axis=2, dtype=samples.dtype)
    samples = np.moveaxis(samples, 0, -1).reshape(height, width, spp)
    if depth == 16:
        samples = (samples >> 8).astype(np.uint8)
    if photometric == 3:
        colormap = tags.get(320)
        if colormap is None or colormap.size != 3 << depth:
            raise _bad("TIFF", "palette image without a colour map of 3 * 2^bits entries")
        palette = (colormap.reshape(3, -1).T >> 8).astype(np.uint8)
        return _lookup("TIFF", palette, samples[..., 0])
    if photometric == 2:
        return samples[..., :3]
    grey = samples[..., :1] * np.uint8(255 // ((1 << min(depth, 8)) - 1))
    return 255 - grey if photometric == 0 else grey


# --- the op -------------------------------------------------------------------------------------


def _decode(data):
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return _decode_png(data)
    if data[:2] == b"BM":
        return _decode_bmp(data)
    if data[:1] == b"P" and data[1:2] in b"123456" and len(data) > 2 and data[2:3].isspace():
        return _decode_pnm(data)
    if data[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):
        return _decode_tiff(data)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        raise Fail("ImageDecoder: WebP images are not supported (no WebP decoder without an image library)")
    for magic, name in _UNSUPPORTED:
        if data.startswith(magic):
            raise Fail(f"ImageDecoder: {name} images are not supported (no {name} decoder without an "
                       "image library); supported formats are PNG, BMP, PNM (P1-P6) and TIFF")
    raise InvalidArgument(f"ImageDecoder: unrecognised image format (first bytes {data[:8]!r}); "
                          "supported formats are PNG, BMP, PNM (P1-P6) and TIFF")


@kernel("ImageDecoder", since=(20,))
def image_decoder(encoded, *, pixel_format):
    if pixel_format not in ("RGB", "BGR", "Grayscale"):
        raise InvalidArgument(f"ImageDecoder: pixel_format {pixel_format!r} is not RGB, BGR or Grayscale")
    if encoded.dtype != np.uint8 or encoded.ndim != 1:
        raise InvalidArgument(f"ImageDecoder: encoded stream must be a 1-D uint8 tensor, "
                              f"got {encoded.dtype} of shape {list(encoded.shape)}")
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

"""ImageDecoder through the public API, on images this file encodes itself.

The encoders here are deliberately simple and independent of the decoder (Pillow): PNG rows are
filtered from the original bytes (which needs no recurrence), BMP/PNM/TIFF are written field by
field; JPEG, WebP and JPEG 2000 are written by Pillow.  Every test decodes and compares pixels
exactly (where a conversion's rounding is Pillow's, ONNX's reference implementation is the
oracle); malformed files must raise an onnxplug error.
"""

from __future__ import annotations

import io
import struct
import sys
import zlib

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import onnxplug
from onnxplug.errors import Fail, InvalidArgument, OnnxplugError

PIL_Image = pytest.importorskip("PIL.Image", reason="ImageDecoder decodes through Pillow (onnxplug-cpu[image])")

RNG = np.random.default_rng(1234)


def _session(pixel_format="RGB"):
    node = helper.make_node("ImageDecoder", ["data"], ["image"], pixel_format=pixel_format)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("data", TensorProto.UINT8, [None])],
        [helper.make_tensor_value_info("image", TensorProto.UINT8, [None, None, None])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    return onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


SESSIONS = {}


def reference(data, pixel_format="RGB"):
    """ONNX's reference implementation of ImageDecoder (the spec's oracle)."""
    node = helper.make_node("ImageDecoder", ["data"], ["image"], pixel_format=pixel_format)
    return ReferenceEvaluator(node).run(None, {"data": np.frombuffer(bytes(data), np.uint8)})[0]


def decode(data, pixel_format="RGB"):
    if pixel_format not in SESSIONS:
        SESSIONS[pixel_format] = _session(pixel_format)
    return SESSIONS[pixel_format].run(None, {"data": np.frombuffer(bytes(data), np.uint8)})[0]


def luma(rgb):
    """ITU-R 601 luma in the 16-bit fixed point of Pillow's ``convert("L")``, which made onnx's
    expected outputs; it can differ by one from the rounded float formula."""
    r, g, b = (rgb[..., i].astype(np.int64) for i in range(3))
    fixed = (19595 * r + 38470 * g + 7471 * b + 32768) >> 16
    assert np.all(np.abs(fixed - (0.299 * r + 0.587 * g + 0.114 * b)) <= 1)
    return fixed.astype(np.uint8)[..., None]


def random_image(height, width, channels=3):
    return RNG.integers(0, 256, (height, width, channels), dtype=np.uint8)


# --- PNG encoder ------------------------------------------------------------------------------


def _chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _filter_rows(rows, bpp, filters):
    """Filter ``(H, rowbytes)`` uint8 rows with the given per-row filter types."""
    h, n = rows.shape
    x = rows.astype(np.int16)
    left = np.zeros_like(x)
    left[:, bpp:] = x[:, :-bpp]
    up = np.zeros_like(x)
    up[1:] = x[:-1]
    corner = np.zeros_like(x)
    corner[1:, bpp:] = x[:-1, :-bpp]
    pa, pb, pc = np.abs(up - corner), np.abs(left - corner), np.abs(left + up - 2 * corner)
    paeth = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, up, corner))
    preds = [np.zeros_like(x), left, up, (left + up) >> 1, paeth]
    out = np.empty((h, n + 1), np.uint8)
    for y in range(h):
        f = filters[y % len(filters)]
        out[y, 0] = f
        out[y, 1:] = (x[y] - preds[f % 5][y]) & 255  # f > 4 writes an invalid filter type
    return out


def _pack_rows(samples, depth):
    """``(H, W*C)`` integer samples -> packed big-endian rows of ``depth`` bits."""
    h, n = samples.shape
    if depth == 16:
        return samples.astype(">u2").view(np.uint8).reshape(h, 2 * n)
    if depth == 8:
        return samples.astype(np.uint8)
    bits = (samples[..., None] >> np.arange(depth - 1, -1, -1)) & 1
    return np.packbits(bits.reshape(h, n * depth).astype(np.uint8), axis=1)


_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


def encode_png(samples, color, depth=8, filters=(0, 1, 2, 3, 4), palette=None, interlace=False, extra=b""):
    h, w, c = samples.shape
    bpp = max(1, c * depth // 8)
    raw = b""
    passes = _ADAM7 if interlace else ((0, 0, 1, 1),)
    for x0, y0, dx, dy in passes:
        sub = samples[y0::dy, x0::dx]
        if sub.size == 0:
            continue
        rows = _pack_rows(sub.reshape(sub.shape[0], -1), depth)
        raw += _filter_rows(rows, bpp, filters).tobytes()
    out = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, int(interlace)))
    if palette is not None:
        out += _chunk(b"PLTE", palette.astype(np.uint8).tobytes())
    out += extra
    z = zlib.compress(raw)
    # split the stream over two IDAT chunks, as encoders may
    out += _chunk(b"IDAT", z[: len(z) // 2]) + _chunk(b"IDAT", z[len(z) // 2 :])
    return out + _chunk(b"tEXt", b"Comment\x00hi") + _chunk(b"IEND", b"")


@pytest.mark.parametrize("filters", [(0,), (1,), (2,), (3,), (4,), (0, 1, 2, 3, 4), (2, 2, 1, 2, 0, 2)])
def test_png_rgb_filters(filters):
    image = random_image(13, 17)
    # smooth regions make Paeth/Average pick different predictors than on noise
    image[4:9] = np.arange(17, dtype=np.uint8)[None, :, None] * 7
    data = encode_png(image, 2, filters=filters)
    np.testing.assert_array_equal(decode(data), image)
    np.testing.assert_array_equal(decode(data, "BGR"), image[..., ::-1])
    np.testing.assert_array_equal(decode(data, "Grayscale"), luma(image))


@pytest.mark.parametrize("filters", [(3,), (4,), (0, 4, 1, 3, 2)])
def test_png_large_enough_for_the_diagonal_sweep(filters):
    # big enough that Average/Paeth rows are rebuilt by anti-diagonals rather than byte by byte
    image = random_image(130, 140)
    image[40:90] = (np.arange(140) // 3).astype(np.uint8)[None, :, None]
    np.testing.assert_array_equal(decode(encode_png(image, 2, filters=filters)), image)
    wide = RNG.integers(0, 65536, (60, 70, 4), dtype=np.uint16)
    np.testing.assert_array_equal(
        decode(encode_png(wide, 6, 16, filters=filters)), (wide[..., :3] >> 8).astype(np.uint8)
    )


def test_png_rgba_and_16_bit():
    image = random_image(9, 6, 4)
    np.testing.assert_array_equal(decode(encode_png(image, 6)), image[..., :3])
    wide = RNG.integers(0, 65536, (5, 7, 3), dtype=np.uint16)
    np.testing.assert_array_equal(decode(encode_png(wide, 2, 16)), (wide >> 8).astype(np.uint8))
    wide_rgba = RNG.integers(0, 65536, (4, 3, 4), dtype=np.uint16)
    np.testing.assert_array_equal(decode(encode_png(wide_rgba, 6, 16)), (wide_rgba[..., :3] >> 8).astype(np.uint8))


@pytest.mark.parametrize("depth", [1, 2, 4, 8])
def test_png_grayscale_depths(depth):
    values = RNG.integers(0, 1 << depth, (7, 11, 1))
    expected = (values * 255 // ((1 << depth) - 1)).astype(np.uint8)
    data = encode_png(values, 0, depth)
    np.testing.assert_array_equal(decode(data, "Grayscale"), expected)
    np.testing.assert_array_equal(decode(data), np.repeat(expected, 3, axis=2))


def test_png_grey_16_bit_follows_the_reference():
    data = encode_png(RNG.integers(0, 1 << 16, (7, 11, 1)), 0, 16)
    np.testing.assert_array_equal(decode(data, "Grayscale"), reference(data, "Grayscale"))


def test_png_grey_alpha():
    image = random_image(5, 4, 2)
    np.testing.assert_array_equal(decode(encode_png(image, 4), "Grayscale"), image[..., :1])


@pytest.mark.parametrize("depth", [1, 2, 4, 8])
def test_png_palette(depth):
    palette = random_image(1, 1 << depth, 3)[0]
    indices = RNG.integers(0, 1 << depth, (6, 9, 1))
    data = encode_png(indices, 3, depth, palette=palette)
    np.testing.assert_array_equal(decode(data), palette[indices[..., 0]])


@pytest.mark.parametrize("shape", [(1, 1), (3, 2), (9, 10), (17, 13)])
def test_png_interlaced(shape):
    image = random_image(*shape)
    np.testing.assert_array_equal(decode(encode_png(image, 2, interlace=True)), image)
    grey = RNG.integers(0, 4, shape + (1,))
    np.testing.assert_array_equal(
        decode(encode_png(grey, 0, 2, interlace=True), "Grayscale"), (grey * 85).astype(np.uint8)
    )


def test_png_malformed():
    good = encode_png(random_image(8, 8), 2)
    for bad in (good[:40], good[:-20], good[:8] + b"\x00" * 30):
        with pytest.raises(InvalidArgument):
            decode(bad)
    corrupt = bytearray(good)
    corrupt[20] ^= 0xFF  # inside IHDR: CRC no longer matches
    with pytest.raises(InvalidArgument, match="ImageDecoder: .*corrupt"):
        decode(corrupt)
    with pytest.raises(InvalidArgument, match="ImageDecoder: corrupt PNG image"):
        decode(encode_png(random_image(4, 4), 2, filters=(7,)))
    with pytest.raises(InvalidArgument, match="ImageDecoder: .*corrupt"):
        decode(encode_png(random_image(2, 2), 2, 4))


def test_png_huge_dimensions_rejected_without_allocating():
    header = struct.pack(">IIBBBBB", 2**31 - 1, 2**31 - 1, 8, 2, 0, 0, 0)
    data = (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(b"\x00" * 100))
        + _chunk(b"IEND", b"")
    )
    with pytest.raises(InvalidArgument):
        decode(data)
    header = struct.pack(">IIBBBBB", 20000, 20000, 8, 2, 0, 0, 0)  # within the limit: data is short
    data = (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(b"\x00" * 100))
        + _chunk(b"IEND", b"")
    )
    with pytest.raises(InvalidArgument, match="decompression.bomb"):
        decode(data)


def test_decompression_bomb_limit_is_pillows(monkeypatch):
    data = encode_png(random_image(40, 50), 2)
    monkeypatch.setattr(PIL_Image, "MAX_IMAGE_PIXELS", 1999)
    with (
        pytest.warns(PIL_Image.DecompressionBombWarning),
        pytest.raises(InvalidArgument, match=r"PNG image of 50x40 pixels exceeds the decompression-bomb limit of 1999"),
    ):
        decode(data)
    monkeypatch.setattr(PIL_Image, "MAX_IMAGE_PIXELS", 2000)
    assert decode(data).shape == (40, 50, 3)


def test_allocation_limit_checked_before_decoding(monkeypatch):
    monkeypatch.setenv("ONNXPLUG_MAX_TENSOR_BYTES", "1000")
    with pytest.raises(InvalidArgument, match="ImageDecoder PNG image"):
        decode(encode_png(random_image(20, 20), 2))


# --- BMP ----------------------------------------------------------------------------------------


def encode_bmp(image, bits=24, top_down=False, palette=None, masks=None):
    h, w = image.shape[:2]
    if bits == 24:
        pixels = image[..., ::-1]
    elif bits == 32:
        pixels = np.concatenate([image[..., ::-1], np.full((h, w, 1), 7, np.uint8)], axis=2)
    elif bits == 16:
        pixels = image.astype("<u2").view(np.uint8)
    else:
        pixels = np.packbits(
            ((image[..., None] >> np.arange(bits - 1, -1, -1)) & 1).reshape(h, -1).astype(np.uint8), axis=1
        )
    rows = pixels.reshape(h, -1)
    stride = (rows.shape[1] + 3) // 4 * 4
    body = np.zeros((h, stride), np.uint8)
    body[:, : rows.shape[1]] = rows
    if not top_down:
        body = body[::-1]
    table = b""
    if palette is not None:
        table = (
            np.concatenate([palette[:, ::-1], np.zeros((len(palette), 1), np.uint8)], axis=1).astype(np.uint8).tobytes()
        )
    compression = 0
    if masks is not None:
        table, compression = struct.pack("<III", *masks), 3
    offset = 14 + 40 + len(table)
    info = struct.pack(
        "<IiiHHIIiiII",
        40,
        w,
        -h if top_down else h,
        1,
        bits,
        compression,
        body.size,
        2835,
        2835,
        0 if palette is None else len(palette),
        0,
    )
    return b"BM" + struct.pack("<IHHI", offset + body.size, 0, 0, offset) + info + table + body.tobytes()


@pytest.mark.parametrize("top_down", [False, True])
@pytest.mark.parametrize("width", [1, 3, 4, 5])
def test_bmp_24_bit(width, top_down):
    image = random_image(6, width)
    np.testing.assert_array_equal(decode(encode_bmp(image, top_down=top_down)), image)


def test_bmp_32_bit_and_palettes():
    image = random_image(5, 7)
    np.testing.assert_array_equal(decode(encode_bmp(image, 32)), image)
    np.testing.assert_array_equal(decode(encode_bmp(image, 32), "Grayscale"), luma(image))
    for bits in (1, 4, 8):
        palette = random_image(1, 1 << bits)[0]
        indices = RNG.integers(0, 1 << bits, (4, 9))
        np.testing.assert_array_equal(decode(encode_bmp(indices, bits, palette=palette)), palette[indices])


def test_bmp_bitfields_565():
    r, g, b = RNG.integers(0, 32, (3, 4)), RNG.integers(0, 64, (3, 4)), RNG.integers(0, 32, (3, 4))
    packed = (r << 11) | (g << 5) | b
    data = encode_bmp(packed, 16, masks=(0xF800, 0x07E0, 0x001F))
    expected = np.stack([(r * 255 + 15) // 31, (g * 255 + 31) // 63, (b * 255 + 15) // 31], axis=-1)
    assert np.abs(decode(data).astype(int) - expected).max() <= 1  # 5/6-bit scaling rounds Pillow's way
    np.testing.assert_array_equal(decode(data), reference(data))


def test_bmp_malformed():
    good = encode_bmp(random_image(8, 8))
    for bad in (good[:20], good[:-10]):
        with pytest.raises(InvalidArgument):
            decode(bad)


# --- PNM ----------------------------------------------------------------------------------------


def test_pnm_binary():
    image = random_image(4, 5)
    p6 = b"P6\n# a comment\n5 4\n255\n" + image.tobytes()
    np.testing.assert_array_equal(decode(p6), image)
    grey = random_image(3, 2, 1)
    np.testing.assert_array_equal(decode(b"P5 2 3 255 " + grey.tobytes(), "Grayscale"), grey)
    np.testing.assert_array_equal(decode(b"P5 2 3 255 " + grey.tobytes()), np.repeat(grey, 3, axis=2))
    wide = RNG.integers(0, 1024, (3, 2, 3))
    data = b"P6 2 3 1023\n" + wide.astype(">u2").tobytes()
    np.testing.assert_array_equal(decode(data), ((wide * 255 + 511) // 1023).astype(np.uint8))
    bits = RNG.integers(0, 2, (3, 10))
    data = b"P4\n10 3\n" + np.packbits(bits, axis=1).tobytes()
    np.testing.assert_array_equal(decode(data, "Grayscale")[..., 0], ((1 - bits) * 255).astype(np.uint8))


def test_pnm_plain():
    image = RNG.integers(0, 16, (2, 3, 3))
    text = "P3\n3 2\n# comment\n15\n" + "\n".join(" ".join(map(str, row)) for row in image.reshape(2, -1))
    np.testing.assert_array_equal(decode(text.encode()), ((image * 255 + 7) // 15).astype(np.uint8))
    grey = RNG.integers(0, 256, (2, 4))
    text = "P2 4 2 255 " + " ".join(map(str, grey.ravel()))
    np.testing.assert_array_equal(decode(text.encode(), "Grayscale")[..., 0], grey.astype(np.uint8))
    np.testing.assert_array_equal(decode(b"P1\n3 2\n010\n1 1 0\n", "Grayscale")[..., 0], [[255, 0, 255], [0, 0, 255]])


def test_pnm_malformed():
    for bad in (
        b"P6\n4 4\n255\n" + b"\x00" * 10,
        b"P6\nx 4\n255\n" + b"\x00" * 48,
        b"P6 99999999999 1 255 ",
        b"P2 2 2 10 1 2 3",
        b"P2 2 2 10 1 2 3 11",
        b"P2 2 2 10 1 2 3 x",
        b"P6 0 4 255 \x00\x00\x00\x00\x00",
        b"P6 \t" + b"# x" * 5000 + b"!",
    ):
        with pytest.raises(InvalidArgument):
            decode(bad)


# --- TIFF ---------------------------------------------------------------------------------------


def encode_tiff(image, order="<", photometric=2, compression=1, rows_per_strip=2, planar=1, predictor=1, depth=8):
    h, w, c = image.shape
    dtype = np.dtype(order + ("u2" if depth == 16 else "u1"))
    planes = [image[..., i : i + 1] for i in range(c)] if planar == 2 else [image]
    strips = []
    for plane in planes:
        for y in range(0, h, rows_per_strip):
            block = plane[y : y + rows_per_strip].astype(dtype)
            if predictor == 2:
                block = block.copy()
                block[:, 1:] = block[:, 1:] - plane[y : y + rows_per_strip, :-1].astype(dtype)
            raw = block.tobytes()
            strips.append(zlib.compress(raw) if compression == 8 else raw)
    data = bytearray(struct.pack(order + "2sHI", b"II" if order == "<" else b"MM", 42, 0))
    offsets = []
    for strip in strips:
        offsets.append(len(data))
        data += strip
    entries = [
        (256, 4, [w]),
        (257, 4, [h]),
        (258, 3, [depth] * c),
        (259, 3, [compression]),
        (262, 3, [photometric]),
        (273, 4, offsets),
        (277, 3, [c]),
        (278, 4, [rows_per_strip]),
        (279, 4, [len(s) for s in strips]),
        (284, 3, [planar]),
        (317, 3, [predictor]),
    ]
    ifd_entries, blobs = [], []
    ifd_at = len(data) + len(data) % 2
    data += b"\x00" * (len(data) % 2)
    extra_at = ifd_at + 2 + 12 * len(entries) + 4
    for tag, typ, values in entries:
        fmt = order + ("H" if typ == 3 else "I") * len(values)
        payload = struct.pack(fmt, *values)
        if len(payload) <= 4:
            field = payload.ljust(4, b"\x00")
        else:
            field = struct.pack(order + "I", extra_at + sum(map(len, blobs)))
            blobs.append(payload)
        ifd_entries.append(struct.pack(order + "HHI", tag, typ, len(values)) + field)
    struct.pack_into(order + "I", data, 4, ifd_at)
    data += struct.pack(order + "H", len(entries)) + b"".join(ifd_entries) + b"\x00" * 4 + b"".join(blobs)
    return bytes(data)


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize(("compression", "planar", "predictor"), [(1, 1, 1), (8, 1, 2), (1, 2, 1), (8, 2, 2)])
def test_tiff_rgb(order, compression, planar, predictor):
    image = random_image(5, 6)
    data = encode_tiff(image, order, compression=compression, planar=planar, predictor=predictor)
    np.testing.assert_array_equal(decode(data), image)


def test_tiff_grey_and_16_bit():
    grey = random_image(5, 3, 1)
    np.testing.assert_array_equal(decode(encode_tiff(grey, photometric=1), "Grayscale"), grey)
    np.testing.assert_array_equal(decode(encode_tiff(grey, ">", photometric=0), "Grayscale"), 255 - grey)
    wide = RNG.integers(0, 65536, (3, 4, 3), dtype=np.uint16)
    np.testing.assert_array_equal(
        decode(encode_tiff(wide, ">", depth=16, rows_per_strip=3)), (wide >> 8).astype(np.uint8)
    )


def test_tiff_malformed():
    good = encode_tiff(random_image(4, 4))
    for bad in (good[:12], good[:30] + b"\xff" * 8, good[:6] + b"\x40" + good[7:]):
        with pytest.raises(InvalidArgument):
            decode(bad)
    with pytest.raises(InvalidArgument, match="ImageDecoder: corrupt TIFF image"):
        decode(encode_tiff(random_image(2, 2), compression=5))  # marked LZW, but the strips are raw


# --- other formats and garbage -----------------------------------------------------------------


def _pillow_encoded(image, fmt, **options):
    buffer = io.BytesIO()
    PIL_Image.fromarray(image).save(buffer, fmt, **options)
    return buffer.getvalue()


@pytest.mark.parametrize("pixel_format", ["RGB", "BGR", "Grayscale"])
def test_jpeg_matches_the_reference(pixel_format):
    data = _pillow_encoded(random_image(24, 31), "JPEG", quality=80)
    decoded = decode(data, pixel_format)
    assert decoded.shape == (24, 31, 1 if pixel_format == "Grayscale" else 3)
    np.testing.assert_array_equal(decoded, reference(data, pixel_format))


def test_lossless_webp_and_jpeg2000():
    image = random_image(9, 14)
    np.testing.assert_array_equal(decode(_pillow_encoded(image, "WEBP", lossless=True)), image)
    np.testing.assert_array_equal(decode(_pillow_encoded(image, "JPEG2000", irreversible=False)), image)
    np.testing.assert_array_equal(decode(_pillow_encoded(image, "WEBP", lossless=True), "BGR"), image[..., ::-1])


@pytest.mark.parametrize(
    ("data", "name"),
    [
        (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + b"\x00" * 20, "JPEG"),
        (b"\x00\x00\x00\x0cjP  \r\n\x87\n" + b"\x00" * 20, "JPEG 2000"),
        (b"RIFF\x00\x01\x00\x00WEBPVP8 " + b"\x00" * 20, "WebP"),
    ],
)
def test_corrupt_files_raise_invalid_argument(data, name):
    with pytest.raises(InvalidArgument, match="ImageDecoder: .*corrupt"):
        decode(data)


def test_without_pillow_the_error_names_the_extra(monkeypatch):
    data = encode_png(random_image(2, 2), 2)
    monkeypatch.setitem(sys.modules, "PIL", None)
    monkeypatch.setitem(sys.modules, "PIL.Image", None)
    with pytest.raises(Fail, match=r"Pillow.*onnxplug-cpu\[image\]"):
        decode(data)


@pytest.mark.parametrize(
    "data", [b"", b"\x89PNG", b"hello world, not an image", bytes(RNG.integers(0, 256, 64, dtype=np.uint8))]
)
def test_garbage_raises(data):
    with pytest.raises(OnnxplugError):
        decode(data)


def test_bad_pixel_format():
    with pytest.raises(OnnxplugError):
        decode(encode_png(random_image(2, 2), 2), "HSV")

"""The partition picture in a real browser: headless Chromium lays it out with the vendored
dagre, and the screenshot shows the drawn graph (slow; needs a chromium executable)."""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
import tempfile

import numpy as np
import onnx
import onnx.backend.test
import pytest
from onnx import TensorProto, helper

from onnxplug.cli import main

pytestmark = pytest.mark.slow

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
LIGHT = pathlib.Path(onnx.backend.test.__file__).parent / "data" / "light"
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--window-size=1400,900",
]  # fmt: skip


def _chromium(page: pathlib.Path, *extra: str, fragment: str = "") -> subprocess.CompletedProcess:
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *extra, page.as_uri() + fragment],
            capture_output=True, text=True, timeout=180, check=True,
        )  # fmt: skip


def _rendered(page: pathlib.Path) -> tuple[int, int]:
    """(boxes drawn, ``data-rendered``) from the DOM after the page's scripts ran."""
    dom = _chromium(page, "--dump-dom", "--virtual-time-budget=60000").stdout
    rendered = re.search(r'<body data-rendered="(\d+)"', dom)
    assert rendered, "the script finished (body carries data-rendered)"
    drawing = dom[dom.index('<g id="root"') : dom.index("</svg>")]
    return len(re.findall(r'<g data-id="', drawing)), int(rendered.group(1))


def _screenshot(page: pathlib.Path, tmp_path: pathlib.Path, fragment: str = "") -> np.ndarray:
    image = pytest.importorskip("PIL.Image", reason="reading the screenshot needs Pillow")
    shot = tmp_path / "shot.png"
    _chromium(page, f"--screenshot={shot}", "--virtual-time-budget=60000", fragment=fragment)
    return np.asarray(image.open(shot).convert("RGB"))


def _has_colour(pixels: np.ndarray, hex_colour: str, at_least: int) -> bool:
    rgb = np.array([int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)])
    return int((np.abs(pixels.astype(int) - rgb).sum(axis=2) < 12).sum()) >= at_least


def test_light_model_with_copies(tmp_path):
    page = tmp_path / "squeezenet.html"
    model = LIGHT / "light_squeezenet.onnx"
    assert main(["partition", str(model), "--providers", "VirtualDeviceExecutionProvider,CPUExecutionProvider",
                 "--html", str(page)]) == 0  # fmt: skip
    drawn, rendered = _rendered(page)
    assert drawn == rendered > 66
    fitted = _screenshot(page, tmp_path)
    below_legend = fitted[80:]
    assert _has_colour(below_legend, "#a6cee3", 50) and _has_colour(below_legend, "#fdbf6f", 50)
    focused = _screenshot(page, tmp_path, fragment="#node=n16")  # centred on a node, readable
    assert _has_colour(focused[80:], "#fdbf6f", 5000)  # a full-size box in the CPU colour
    assert _has_colour(focused[80:], "#cc0000", 20)  # the red declined mark


def _bert_sized(path: pathlib.Path, blocks: int = 80) -> int:
    """A transformer-like graph of ~1000 nodes: residual blocks of matmul, softmax, layer norm."""
    nodes, inits = [], []
    x = "x"
    for b in range(blocks):
        w = f"w{b}"
        inits.append(helper.make_tensor(w, TensorProto.FLOAT, [16, 16], np.eye(16, dtype=np.float32).ravel()))
        names = [f"b{b}_{k}" for k in range(12)]
        nodes += [
            helper.make_node("MatMul", [x, w], [names[0]]),
            helper.make_node("MatMul", [x, w], [names[1]]),
            helper.make_node("MatMul", [x, w], [names[2]]),
            helper.make_node("Transpose", [names[1]], [names[3]], perm=[1, 0]),
            helper.make_node("MatMul", [names[0], names[3]], [names[4]]),
            helper.make_node("Softmax", [names[4]], [names[5]], axis=-1),
            helper.make_node("MatMul", [names[5], names[2]], [names[6]]),
            helper.make_node("Add", [names[6], x], [names[7]]),
            helper.make_node("Relu", [names[7]], [names[8]]),
            helper.make_node("MatMul", [names[8], w], [names[9]]),
            helper.make_node("Add", [names[9], names[7]], [names[10]]),
            helper.make_node("Sigmoid", [names[10]], [names[11]]),
        ]
        x = names[11]
    graph = helper.make_graph(
        nodes, "bert_sized", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [4, 16])], inits,
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return len(nodes)


def test_bert_sized_graph(tmp_path):
    model, page = tmp_path / "big.onnx", tmp_path / "big.html"
    count = _bert_sized(model)
    assert count >= 900
    assert main(["partition", str(model), "--providers", "VirtualDeviceExecutionProvider,CPUExecutionProvider",
                 "--html", str(page)]) == 0  # fmt: skip
    drawn, rendered = _rendered(page)
    assert drawn == rendered >= count + 2
    pixels = _screenshot(page, tmp_path)[80:]
    assert _has_colour(pixels, "#a6cee3", 20) and _has_colour(pixels, "#fdbf6f", 20)

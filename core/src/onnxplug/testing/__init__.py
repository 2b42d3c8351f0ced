"""Helpers for testing onnxplug and its plugins, importable by plugin authors.

- :func:`make_model` builds a small ModelProto from nodes in one call.
- :func:`fake_distribution` writes an installed-looking distribution (dist-info with entry
  points, plus its module) into a folder, so discovery can be tested through the real
  ``importlib.metadata`` without installing anything.
"""

from __future__ import annotations

import pathlib
import textwrap
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = ["make_model", "fake_distribution"]


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[tuple[str, int, Sequence | None]],
    outputs: Sequence[tuple[str, int, Sequence | None]],
    initializers: Mapping[str, np.ndarray] | None = None,
    *,
    opset: int = 17,
    extra_opsets: Mapping[str, int] | None = None,
) -> onnx.ModelProto:
    """A model from nodes, ``(name, elem_type, shape)`` inputs/outputs and named initializers."""
    graph = helper.make_graph(
        list(nodes),
        "test_graph",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (initializers or {}).items()],
    )
    opsets = [helper.make_opsetid("", opset)]
    opsets += [helper.make_opsetid(d, v) for d, v in (extra_opsets or {}).items()]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = min(model.ir_version, onnx.IR_VERSION)
    return model


def fake_distribution(
    root: pathlib.Path,
    name: str,
    entry_points: Mapping[str, str],
    modules: Mapping[str, str],
    *,
    version: str = "1.0",
    group: str = "onnxplug",
) -> pathlib.Path:
    """Write a distribution ``name`` into ``root`` (put ``root`` on ``sys.path`` to "install" it).

    :param entry_points: entry-point name → ``module`` or ``module:attr``.
    :param modules: module name → source code.
    :returns: ``root``.
    """
    root = pathlib.Path(root)
    dist_info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = [f"[{group}]"] + [f"{ep} = {target}" for ep, target in entry_points.items()]
    (dist_info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    for module, source in modules.items():
        (root / f"{module}.py").write_text(textwrap.dedent(source))
    return root

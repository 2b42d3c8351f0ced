"""``onnxplug inspect MODEL``: what a model is made of, read from the file alone (no session).

Inputs and outputs with types and shapes, opsets, the operator histogram, the file size, the
initializers' total size, and external data (files and bytes), so a user sees at a glance what
a model needs before running it.
"""

from __future__ import annotations

import argparse
import collections
import json
import os

import onnx

from ..errors import NoSuchFile


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("inspect", help="inputs, outputs, opsets, op histogram, sizes, external data")
    parser.add_argument("model", help="path of an .onnx file")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(handler=run)


def _type(value_info) -> str:
    tensor = value_info.type.tensor_type
    if not value_info.type.HasField("tensor_type"):
        return value_info.type.WhichOneof("value") or "unknown"
    dims = [d.dim_param or (str(d.dim_value) if d.HasField("dim_value") else "?") for d in tensor.shape.dim]
    shape = f"[{', '.join(dims)}]" if tensor.HasField("shape") else "(unknown rank)"
    return f"{onnx.TensorProto.DataType.Name(tensor.elem_type).lower()} {shape}"


def summarize(path: str) -> dict:
    if not os.path.isfile(path):
        raise NoSuchFile(f"no model file at {path!r}")
    model = onnx.load(path, load_external_data=False)
    graph = model.graph
    initializers = {i.name for i in graph.initializer}
    ops: collections.Counter[str] = collections.Counter()

    def count(g):
        for node in g.node:
            ops[f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type] += 1
            for attr in node.attribute:
                for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                    count(sub)

    count(graph)
    external: dict[str, int] = collections.Counter()
    inline_bytes = 0
    for init in graph.initializer:
        if init.data_location == onnx.TensorProto.EXTERNAL:
            entries = {e.key: e.value for e in init.external_data}
            external[entries.get("location", "?")] += int(entries.get("length", 0) or 0)
        else:
            inline_bytes += init.ByteSize()
    return {
        "path": path,
        "file_bytes": os.path.getsize(path),
        "ir_version": model.ir_version,
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "opsets": {(o.domain or "ai.onnx"): o.version for o in model.opset_import},
        "inputs": {i.name: _type(i) for i in graph.input if i.name not in initializers},
        "outputs": {o.name: _type(o) for o in graph.output},
        "nodes": sum(ops.values()),
        "ops": dict(ops.most_common()),
        "initializers": len(graph.initializer),
        "initializer_bytes_inline": inline_bytes,
        "external_data": dict(external),
    }


def run(args: argparse.Namespace) -> int:
    info = summarize(args.model)
    if args.json:
        print(json.dumps(info, indent=1))
        return 0
    print(f"{info['path']}: {info['file_bytes']:,} bytes, IR {info['ir_version']}, producer {info['producer'] or '-'}")
    print("opsets: " + ", ".join(f"{d} {v}" for d, v in sorted(info["opsets"].items())))
    for title in ("inputs", "outputs"):
        print(f"{title}:")
        for name, kind in info[title].items():
            print(f"  {name}: {kind}")
    print(
        f"nodes: {info['nodes']}  initializers: {info['initializers']} "
        f"({info['initializer_bytes_inline']:,} bytes inline)"
    )
    print("ops: " + ", ".join(f"{op} {n}" for op, n in info["ops"].items()))
    if info["external_data"]:
        print("external data: " + ", ".join(f"{f} ({n:,} bytes)" for f, n in info["external_data"].items()))
    else:
        print("external data: none")
    return 0

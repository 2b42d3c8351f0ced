"""The ops' schemas: what onnx's checker and shape inference know about them."""

from __future__ import annotations

import onnx
from onnx.defs import OpSchema

from . import DOMAIN

_STRING = "tensor(string)"


def _same_shape_as_input(output_type: int):
    """Shape inference: the output has the input's shape and ``output_type`` elements."""

    def infer(ctx) -> None:
        shape = None
        if ctx.has_input(0):
            tensor = ctx.get_input_type(0).tensor_type
            if tensor.HasField("shape"):
                shape = [d.dim_value if d.HasField("dim_value") else d.dim_param or None for d in tensor.shape.dim]
        ctx.set_output_type(0, onnx.helper.make_tensor_type_proto(output_type, shape))

    return infer


def _schema(name: str, doc: str, output_type: str, attributes=()) -> OpSchema:
    schema = OpSchema(
        name,
        DOMAIN,
        1,  # since_version: bump it (and keep the old schema) when the op's meaning changes
        doc,
        inputs=[OpSchema.FormalParameter("X", _STRING, "input strings")],
        outputs=[OpSchema.FormalParameter("Y", output_type, "one result per input string")],
        attributes=list(attributes),
    )
    elem = onnx.TensorProto.STRING if output_type == _STRING else onnx.TensorProto.INT64
    schema.set_type_and_shape_inference_function(_same_shape_as_input(elem))
    return schema


def op_schemas() -> list[OpSchema]:
    return [
        _schema("StringLower", "Lower-cases every string (Unicode rules, as str.lower).", _STRING),
        _schema(
            "StringReplace",
            "Replaces every occurrence of the literal substring `pattern` with `rewrite`.",
            _STRING,
            [
                OpSchema.Attribute("pattern", OpSchema.AttrType.STRING, "substring to find", required=True),
                OpSchema.Attribute("rewrite", onnx.helper.make_attribute("rewrite", ""), "replacement"),
            ],
        ),
        _schema("WordCount", "Counts the whitespace-separated words of every string.", "tensor(int64)"),
    ]

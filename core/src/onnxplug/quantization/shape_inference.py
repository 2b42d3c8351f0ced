"""``quant_pre_process``: prepare a float model for quantization, as onnxruntime's does.

Steps (each skippable with onnxruntime's flags): onnxplug's optimizer at the basic level
(constant folding, no-op removal: fewer tensors to calibrate), then ONNX shape inference so that
every tensor has a type.  onnxruntime's symbolic shape inference has no counterpart here; with
``skip_symbolic_shape=False`` the ONNX inference stands in for it (it is what the quantizer reads
types from).  The model is marked pre-processed with onnxruntime's metadata key.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import onnx

from ..errors import InvalidArgument

__all__ = ["quant_pre_process"]

PRE_PROCESS_KEY = "onnx.quant.pre_process"


def quant_pre_process(
    input_model=None,
    output_model_path=None,
    skip_optimization: bool = False,
    skip_onnx_shape: bool = False,
    skip_symbolic_shape: bool = False,
    auto_merge: bool = False,
    int_max: int = 2**31 - 1,
    guess_output_rank: bool = False,
    verbose: int = 0,
    save_as_external_data: bool = False,
    all_tensors_to_one_file: bool = False,
    external_data_location: str | None = None,
    external_data_size_threshold: int = 1024,
    **deprecated_kwargs,
) -> None:
    input_model = deprecated_kwargs.pop("input_model_path", input_model)
    if deprecated_kwargs:
        raise InvalidArgument(f"unknown arguments to quant_pre_process: {sorted(deprecated_kwargs)}")
    if input_model is None or output_model_path is None:
        raise InvalidArgument("quant_pre_process needs input_model and output_model_path")
    model = input_model if isinstance(input_model, onnx.ModelProto) else onnx.load(os.fspath(input_model))
    if not skip_optimization:
        model = _optimize_basic(model)
    if not (skip_onnx_shape and skip_symbolic_shape):
        model = onnx.shape_inference.infer_shapes(model)
    props = {p.key: p for p in model.metadata_props}
    if PRE_PROCESS_KEY in props:
        props[PRE_PROCESS_KEY].value = "onnxruntime.quant"
    else:
        model.metadata_props.add(key=PRE_PROCESS_KEY, value="onnxruntime.quant")
    kwargs = {}
    if save_as_external_data:
        kwargs = {
            "save_as_external_data": True,
            "all_tensors_to_one_file": all_tensors_to_one_file,
            "location": external_data_location or Path(output_model_path).name + ".data",
            "size_threshold": external_data_size_threshold,
        }
    onnx.save_model(model, os.fspath(output_model_path), **kwargs)


def _optimize_basic(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnxplug's BASIC optimizer level (what other runtimes can load), via a session that saves
    its optimized graph."""
    from ..runtime import GraphOptimizationLevel, InferenceSession, SessionOptions

    with tempfile.TemporaryDirectory(prefix="onnxplug-prep-") as folder:
        target = os.path.join(folder, "optimized.onnx")
        options = SessionOptions()
        options.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = target
        InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return onnx.load(target)

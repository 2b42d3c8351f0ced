"""``quantize_dynamic``, ``quantize_static`` and ``quantize``: onnxruntime.quantization's entry
points, with its parameter names, order and defaults, running calibration on onnxplug.

Operators this implementation does not quantize (onnxruntime also handles LSTM, Attention,
Gather, Resize...) are left float, exactly as onnxruntime leaves operators it cannot quantize;
the written model is therefore always complete and runnable.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import onnx

from ..errors import InvalidArgument
from ._dynamic import DYNAMIC_OPS, quantize_dynamic_graph
from ._static import QDQ_OPS, QOPERATOR_OPS, StaticQuantizer
from .calibrate import CalibrationDataReader, CalibrationMethod, collect_ranges
from .quant_utils import QuantFormat, QuantizationMode, QuantType

__all__ = [
    "DynamicQuantConfig",
    "QuantConfig",
    "QuantizationMode",
    "StaticQuantConfig",
    "quantize",
    "quantize_dynamic",
    "quantize_static",
]

logger = logging.getLogger(__name__)

# extra_options keys onnxruntime maps onto the calibrator's options.
_CALIBRATION_KEYS = {
    "CalibTensorRangeSymmetric": "symmetric",
    "CalibMovingAverage": "moving_average",
    "CalibMovingAverageConstant": "averaging_constant",
    "CalibMaxIntermediateOutputs": "max_intermediate_outputs",
    "CalibPercentile": "percentile",
    "CalibNumBins": "num_bins",
    "CalibNumQuantizedBins": "num_quantized_bins",
}
_SIXTEEN_OR_FOUR_BIT = {QuantType.QInt16, QuantType.QUInt16, QuantType.QInt4, QuantType.QUInt4}


def _load(model_input) -> onnx.ModelProto:
    if isinstance(model_input, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(model_input)
        return model
    path = Path(model_input)
    if not path.is_file():
        raise InvalidArgument(f"model_input {str(path)!r} is not a file")
    return onnx.load(str(path))


def _ai_onnx_opset(model) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return entry.version
    return 0


def _with_opset(model: onnx.ModelProto, minimum: int) -> onnx.ModelProto:
    """Convert the model up to ``minimum`` (per-channel Q/DQ needs 13, 16-bit and 4-bit types 21)."""
    current = _ai_onnx_opset(model)
    if current >= minimum:
        return model
    logger.warning("the model's opset %d is converted to %d for the quantized operators", current, minimum)
    from onnx import version_converter

    # IR 3 required initializers to be listed as inputs; the converter checks that rule, which
    # optimized models (folded constants) no longer follow.  IR 7 reads the same graph.
    model.ir_version = max(model.ir_version, 7)
    try:
        return version_converter.convert_version(model, minimum)
    except Exception as error:
        raise InvalidArgument(f"cannot convert the model from opset {current} to {minimum}: {error}") from error


def _save(model: onnx.ModelProto, model_output, use_external_data_format: bool) -> None:
    path = os.fspath(model_output)
    if use_external_data_format:
        onnx.save_model(model, path, save_as_external_data=True, location=Path(path).name + ".data")
    else:
        onnx.save_model(model, path)


def _check_types(**types):
    for name, value in types.items():
        if not isinstance(value, QuantType):
            raise InvalidArgument(f"{name} must be a QuantType, got {value!r}")
        if value is QuantType.QFLOAT8E4M3FN:
            raise InvalidArgument(f"{name} QFLOAT8E4M3FN is not supported by onnxplug.quantization (integer types are)")


def quantize_dynamic(
    model_input,
    model_output,
    op_types_to_quantize=None,
    per_channel=False,
    reduce_range=False,
    weight_type=QuantType.QInt8,
    nodes_to_quantize=None,
    nodes_to_exclude=None,
    use_external_data_format=False,
    extra_options=None,
) -> None:
    """Quantize the weights of MatMul (constant B) and Conv ahead; activations at run time.

    ``extra_options``: ``MatMulConstBOnly`` (default True here, as in onnxruntime),
    ``WeightSymmetric`` (default: True for signed weight types).
    """
    _check_types(weight_type=weight_type)
    extra = dict(extra_options or {})
    model = _load(model_input)
    op_types = list(op_types_to_quantize or DYNAMIC_OPS)
    model = _with_opset(model, 21 if weight_type in _SIXTEEN_OR_FOUR_BIT else (13 if per_channel else 11))
    quantized = quantize_dynamic_graph(
        model, op_types, nodes_to_quantize, nodes_to_exclude, per_channel, reduce_range, weight_type, extra
    )
    _save(quantized, model_output, use_external_data_format)


def quantize_static(
    model_input,
    model_output,
    calibration_data_reader: CalibrationDataReader | None = None,
    quant_format=QuantFormat.QDQ,
    op_types_to_quantize=None,
    per_channel=False,
    reduce_range=False,
    activation_type=QuantType.QInt8,
    weight_type=QuantType.QInt8,
    nodes_to_quantize=None,
    nodes_to_exclude=None,
    use_external_data_format=False,
    calibrate_method=CalibrationMethod.MinMax,
    calibration_providers=None,
    extra_options=None,
    calibration_cache_path=None,
    *,
    progress: Callable[[int], None] | None = None,
) -> None:
    """Calibrate activations on onnxplug (``calibration_providers``, default: the session's
    default choice), then write a QDQ or QOperator model.

    ``calibration_cache_path``: a JSON file of ``{tensor: [low, high]}``; read instead of
    calibrating when it exists, written after calibrating when it does not.  ``progress`` (an
    onnxplug addition, keyword-only) is called with the count of samples calibrated so far.
    """
    import json

    _check_types(activation_type=activation_type, weight_type=weight_type)
    if not isinstance(quant_format, QuantFormat):
        raise InvalidArgument(f"quant_format must be a QuantFormat, got {quant_format!r}")
    extra = dict(extra_options or {})
    model = _load(model_input)
    uses_wide = {activation_type, weight_type} & _SIXTEEN_OR_FOUR_BIT
    model = _with_opset(model, 21 if uses_wide else (13 if per_channel else 11))
    supported = QDQ_OPS if quant_format is QuantFormat.QDQ else QOPERATOR_OPS
    op_types = list(op_types_to_quantize or supported)
    quantizer = StaticQuantizer(
        model,
        quant_format,
        op_types,
        nodes_to_quantize,
        nodes_to_exclude,
        per_channel,
        reduce_range,
        activation_type,
        weight_type,
        extra,
    )
    cache = Path(calibration_cache_path) if calibration_cache_path is not None else None
    if cache is not None and cache.is_file():
        ranges = {name: tuple(pair) for name, pair in json.loads(cache.read_text()).items()}
    else:
        if calibration_data_reader is None:
            raise InvalidArgument("quantize_static needs a calibration_data_reader (or an existing calibration cache)")
        options = {key: extra[name] for name, key in _CALIBRATION_KEYS.items() if name in extra}
        options.pop("max_intermediate_outputs", None)  # all outputs are measured in one pass
        method = CalibrationMethod(calibrate_method)
        ranges = collect_ranges(
            model,
            quantizer.tensors_to_calibrate(),
            calibration_data_reader,
            method,
            options,
            providers=calibration_providers,
            progress=progress,
        )
        if cache is not None:
            ranges_json = {n: [float(d.lowest), float(d.highest)] for n, d in ranges.items()}
            cache.write_text(json.dumps(ranges_json, indent=1))
    _save(quantizer.quantize(ranges), model_output, use_external_data_format)


class QuantConfig:
    """Settings shared by static and dynamic quantization (onnxruntime's ``QuantConfig``)."""

    def __init__(
        self,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        op_types_to_quantize=None,
        nodes_to_quantize=None,
        nodes_to_exclude=None,
        per_channel=False,
        reduce_range=False,
        use_external_data_format=False,
    ):
        self.op_types_to_quantize = list(op_types_to_quantize or [])
        self.per_channel = per_channel
        self.reduce_range = reduce_range
        self.weight_type = weight_type
        self.activation_type = activation_type
        self.nodes_to_quantize = list(nodes_to_quantize or [])
        self.nodes_to_exclude = list(nodes_to_exclude or [])
        self.use_external_data_format = use_external_data_format


class StaticQuantConfig(QuantConfig):
    def __init__(
        self,
        calibration_data_reader: CalibrationDataReader,
        calibrate_method=CalibrationMethod.MinMax,
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QInt8,
        weight_type=QuantType.QInt8,
        op_types_to_quantize=None,
        nodes_to_quantize=None,
        nodes_to_exclude=None,
        per_channel=False,
        reduce_range=False,
        use_external_data_format=False,
        calibration_providers=None,
        extra_options=None,
    ):
        super().__init__(
            activation_type,
            weight_type,
            op_types_to_quantize,
            nodes_to_quantize,
            nodes_to_exclude,
            per_channel,
            reduce_range,
            use_external_data_format,
        )
        self.calibration_data_reader = calibration_data_reader
        self.calibration_providers = calibration_providers
        self.calibrate_method = calibrate_method
        self.quant_format = quant_format
        self.extra_options = dict(extra_options or {})


class DynamicQuantConfig(QuantConfig):
    def __init__(
        self,
        weight_type=QuantType.QInt8,
        op_types_to_quantize=None,
        nodes_to_quantize=None,
        nodes_to_exclude=None,
        per_channel=False,
        reduce_range=False,
        use_external_data_format=False,
        extra_options=None,
    ):
        super().__init__(
            op_types_to_quantize=op_types_to_quantize,
            per_channel=per_channel,
            reduce_range=reduce_range,
            weight_type=weight_type,
            nodes_to_quantize=nodes_to_quantize,
            nodes_to_exclude=nodes_to_exclude,
            use_external_data_format=use_external_data_format,
        )
        self.extra_options = dict(extra_options or {})


def quantize(model_input, model_output, quant_config: QuantConfig) -> None:
    """Quantize with a config object: static for ``StaticQuantConfig``, dynamic for ``DynamicQuantConfig``."""
    if isinstance(quant_config, StaticQuantConfig):
        quantize_static(
            model_input,
            model_output,
            quant_config.calibration_data_reader,
            calibrate_method=quant_config.calibrate_method,
            quant_format=quant_config.quant_format,
            activation_type=quant_config.activation_type,
            weight_type=quant_config.weight_type,
            op_types_to_quantize=quant_config.op_types_to_quantize,
            nodes_to_quantize=quant_config.nodes_to_quantize,
            nodes_to_exclude=quant_config.nodes_to_exclude,
            per_channel=quant_config.per_channel,
            reduce_range=quant_config.reduce_range,
            use_external_data_format=quant_config.use_external_data_format,
            calibration_providers=quant_config.calibration_providers,
            extra_options=quant_config.extra_options,
        )
    elif isinstance(quant_config, DynamicQuantConfig):
        quantize_dynamic(
            model_input,
            model_output,
            weight_type=quant_config.weight_type,
            op_types_to_quantize=quant_config.op_types_to_quantize,
            nodes_to_quantize=quant_config.nodes_to_quantize,
            nodes_to_exclude=quant_config.nodes_to_exclude,
            per_channel=quant_config.per_channel,
            reduce_range=quant_config.reduce_range,
            use_external_data_format=quant_config.use_external_data_format,
            extra_options=quant_config.extra_options,
        )
    else:
        raise InvalidArgument(f"quant_config must be a StaticQuantConfig or DynamicQuantConfig, got {quant_config!r}")

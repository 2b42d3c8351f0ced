"""onnxplug.quantization: onnxruntime.quantization's API without onnxruntime.

``from onnxplug.quantization import quantize_static, QuantFormat, ...`` replaces the same import
from ``onnxruntime.quantization``.  Calibration runs on onnxplug sessions; the models written are
standard ONNX (QDQ, QOperator or IntegerOps) that onnxruntime and onnxplug both run.  See
``docs/quantization.md``.
"""

from .calibrate import CalibrationDataReader, CalibrationMethod, TensorData, TensorsData
from .quant_utils import QuantFormat, QuantType
from .quantize import (
    DynamicQuantConfig,
    QuantConfig,
    QuantizationMode,
    StaticQuantConfig,
    quantize,
    quantize_dynamic,
    quantize_static,
)
from .shape_inference import quant_pre_process

__all__ = [
    "CalibrationDataReader",
    "CalibrationMethod",
    "DynamicQuantConfig",
    "QuantConfig",
    "QuantFormat",
    "QuantType",
    "QuantizationMode",
    "StaticQuantConfig",
    "TensorData",
    "TensorsData",
    "quant_pre_process",
    "quantize",
    "quantize_dynamic",
    "quantize_static",
]

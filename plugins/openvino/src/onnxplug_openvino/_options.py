"""Provider options, following onnxruntime's OpenVINO execution provider, checked once at creation."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence

from onnxplug.errors import InvalidArgument

__all__ = ["OPTION_NAMES", "PRECISIONS", "Settings", "parse_options"]

OPTION_NAMES = frozenset({"device_type", "precision", "num_of_threads", "num_streams", "cache_dir"})

#: ``precision`` → OpenVINO compile properties.  FP32 pins ``INFERENCE_PRECISION_HINT``: the CPU
#: plugin's own default is bf16 on CPUs with AMX or AVX-512 BF16, so results would depend on the host.
PRECISIONS: dict[str, dict[str, str]] = {
    "FP32": {"INFERENCE_PRECISION_HINT": "f32"},
    "FP16": {"INFERENCE_PRECISION_HINT": "f16"},
    "BF16": {"INFERENCE_PRECISION_HINT": "bf16"},
    # The model's own precision, no down-conversion (onnxruntime's "ACCURACY").
    "ACCURACY": {"EXECUTION_MODE_HINT": "ACCURACY"},
}

_VIRTUAL = ("AUTO", "HETERO", "MULTI", "BATCH")


@dataclasses.dataclass(frozen=True)
class Settings:
    """Checked options: the OpenVINO device name and the properties ``compile_model`` gets."""

    device: str
    precision: str
    config: tuple[tuple[str, str], ...]

    def config_dict(self) -> dict[str, str]:
        return dict(self.config)


def _positive_int(options: Mapping[str, str], key: str, who: str) -> int | None:
    text = options.get(key)
    if text is None or str(text).strip() == "":
        return None
    try:
        value = int(str(text).strip())
    except ValueError:
        value = 0
    if value < 1:
        raise InvalidArgument(f"{who}: provider option '{key}' must be a positive integer, got {text!r}")
    return value


def _check_device(text: str, available: Sequence[str], who: str) -> str:
    device = text.strip().upper()
    base, _, rest = device.partition(":")
    if base in _VIRTUAL:
        members = [m for m in rest.split(",") if m] if rest else []
        for member in members:
            _check_device(member, available, who)
        return device
    known = set(available) | {name.split(".")[0] for name in available}
    if device not in known:
        raise InvalidArgument(
            f"{who}: provider option 'device_type' is {text!r}, which OpenVINO does not see here; "
            f"available: {', '.join(available)} (or AUTO, HETERO:..., MULTI:...)"
        )
    return device


def parse_options(options: Mapping[str, str], default_device: str, available: Sequence[str], who: str) -> Settings:
    """Validate the option values (keys were checked by ``check_options``).

    :raises InvalidArgument: a value out of range, naming the option and what it accepts.
    """
    device = _check_device(options.get("device_type") or default_device, available, who)
    precision = str(options.get("precision") or "FP32").strip().upper()
    if precision not in PRECISIONS:
        raise InvalidArgument(
            f"{who}: provider option 'precision' is {options.get('precision')!r}; valid: {', '.join(PRECISIONS)}"
        )
    config: dict[str, str] = dict(PRECISIONS[precision])
    threads = _positive_int(options, "num_of_threads", who)
    if threads is not None:
        config["INFERENCE_NUM_THREADS"] = str(threads)
    streams = _positive_int(options, "num_streams", who)
    if streams is not None:
        config["NUM_STREAMS"] = str(streams)
    cache_dir = options.get("cache_dir")
    if cache_dir:
        if os.path.exists(cache_dir) and not os.path.isdir(cache_dir):
            raise InvalidArgument(f"{who}: provider option 'cache_dir' {cache_dir!r} is not a folder")
        config["CACHE_DIR"] = os.path.abspath(cache_dir)
    return Settings(device, precision, tuple(sorted(config.items())))

"""The target plugins' sources, for a checkout where they are not installed (``pip install -e
plugins/tensorrt plugins/directml plugins/nnapi`` makes this a no-op)."""

import importlib.util
import pathlib
import sys

_ROOT = pathlib.Path(__file__).resolve().parents[2]
for _name in ("tensorrt", "directml", "nnapi"):
    if importlib.util.find_spec(f"onnxplug_{_name}") is None:
        sys.path.insert(0, str(_ROOT / "plugins" / _name / "src"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # target_models

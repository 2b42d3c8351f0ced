"""This plugin's sources, for a checkout where it is not installed (``pip install -e plugins/coreml``
makes this a no-op)."""

import importlib.util
import pathlib
import sys

if importlib.util.find_spec("onnxplug_coreml") is None:
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "src"))

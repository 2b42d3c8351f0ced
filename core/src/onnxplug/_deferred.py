"""Keep onnx-ir's ``import sympy`` out of start-up: sympy loads when something first reads it.

Why: onnx-ir (1.1) imports sympy at the top of ``onnx_ir._core`` and builds a table of sympy
functions in ``onnx_ir._symbolic_shapes`` at import, only for arithmetic on symbolic dimensions
(``SymbolicDim("N") + 1``), which no stage of onnxplug performs on the way from a model to a
plan.  Importing sympy costs 0.2-0.25 s, a third of the first session of a fresh process.

How: :func:`import_onnx_ir`, called before anything else imports onnx-ir, puts a
:class:`Deferred` stand-in in ``sys.modules`` for ``sympy`` and for ``onnx_ir._symbolic_shapes``,
imports onnx-ir, whose ``import`` statements bind the stand-ins (each carries the real module's
spec, so the import system sees a finished module), and takes the stand-ins out of
``sys.modules`` again.  Only onnx-ir's modules hold them: anyone else importing sympy later gets
the real package by the ordinary import (a stand-in left in ``sys.modules`` would break
``import sympy.core``: the import system would read the package's ``__path__`` before sympy's
``__init__`` ran).  The first attribute onnx-ir reads on a stand-in imports the real module,
and every read is forwarded to it.  Nothing is deferred when sympy or onnx-ir is already
imported, or cannot be found.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import threading
import types
from typing import Any

__all__ = ["Deferred", "import_onnx_ir"]


class Deferred(types.ModuleType):
    """Stands for module ``name`` in the modules that imported it; the first attribute read
    imports the real module and every read is forwarded to it."""

    def __init__(self, name: str, spec: importlib.machinery.ModuleSpec) -> None:
        super().__init__(name)
        # A spec without ``_initializing`` tells the import system the module is ready, so an
        # ``import`` statement returns the stand-in instead of importing (and reading it).
        self.__spec__ = spec
        self.__dict__["_deferred_lock"] = threading.Lock()
        self.__dict__["_deferred_module"] = None

    def _deferred_load(self) -> types.ModuleType:
        module = self.__dict__["_deferred_module"]
        if module is None:
            with self.__dict__["_deferred_lock"]:
                module = self.__dict__["_deferred_module"]
                if module is None:
                    module = importlib.import_module(self.__name__)
                    self.__dict__["_deferred_module"] = module
        return module

    def __getattr__(self, name: str) -> Any:  # only names the stand-in lacks: all but its spec
        return getattr(self._deferred_load(), name)

    def __dir__(self) -> list[str]:
        return dir(self._deferred_load())

    def __repr__(self) -> str:
        state = "loaded" if self.__dict__["_deferred_module"] is not None else "not loaded"
        return f"<deferred module {self.__name__!r} ({state})>"


def import_onnx_ir() -> None:
    """Import onnx-ir with sympy deferred, unless either is imported already (nothing to gain)."""
    if "sympy" in sys.modules or "onnx_ir" in sys.modules:
        return
    try:
        sympy = importlib.util.find_spec("sympy")
        onnx_ir = importlib.util.find_spec("onnx_ir")
        # Found without importing onnx_ir itself, whose import is what is being prepared for.
        locations = onnx_ir.submodule_search_locations if onnx_ir is not None else None
        shapes = importlib.machinery.PathFinder.find_spec("onnx_ir._symbolic_shapes", locations) if locations else None
    except (ImportError, ValueError):
        sympy = shapes = None
    if sympy is None or shapes is None:
        import onnx_ir  # as usual: nothing to defer

        return
    stand_ins = {"sympy": Deferred("sympy", sympy)}
    stand_ins["onnx_ir._symbolic_shapes"] = Deferred("onnx_ir._symbolic_shapes", shapes)
    sys.modules.update(stand_ins)
    try:
        import onnx_ir
    finally:
        for name, stand_in in stand_ins.items():
            if sys.modules.get(name) is stand_in:
                del sys.modules[name]
    # The import system sets a submodule on its package only when it loads it: the stand-in
    # takes that place until an ordinary import of the real module replaces it.
    if "_symbolic_shapes" not in vars(onnx_ir):
        onnx_ir._symbolic_shapes = stand_ins["onnx_ir._symbolic_shapes"]


import_onnx_ir()  # on import: the package's __init__ imports this module before any other

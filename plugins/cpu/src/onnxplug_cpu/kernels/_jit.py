"""The one place the CPU provider decides whether its numba kernels are used.

numba is a dependency of the CPU plugin, but kernels must keep working without it (a broken
install, a platform without wheels) and ``ONNXPLUG_CPU_JIT=0`` turns every compiled loop off, so
each numba-backed kernel module asks :func:`compiler` for its decorator and falls back to numpy when it
gets ``None``. Every loop is compiled with ``cache=True`` (once per machine, kept in numba's cache
directory) and ``nogil=True`` (concurrent ``run()`` calls and row blocks run in parallel).

Importing numba costs memory and time: numba, llvmlite and the first cached kernels add 90-135
MiB of peak RSS (ResNet-50 304 → 396 MiB when its stem MaxPool loaded it; the ``yolo``, ``unet``,
``ocr_det`` and ``ocr_rec`` benchmark models 133-148 → 251-284 MiB, measured as the peak of a
process that creates the session and runs it three times) and about 0.2 s to import.  Kernels
whose compiled loop is a large gain on the layers that use them (depthwise convolutions, SiLU,
LSTM, upsampling, tree ensembles) load it.  A session with a float32 2-D convolution loads it
too (:func:`load_for_feature_maps`, from ``PackedConv``), for the loops such models run around
their products: the convolution epilogue, the shifted convolution's adds and pooling, which
otherwise run only when :func:`numba_loaded` says something else paid for numba.  Measured in
one process, those loops on against off in alternating rounds: 0.88-0.98 of the time on
ResNet-50, DenseNet-121, Inception v1/v2, VGG-19, SqueezeNet and ShuffleNet (docs/benchmarks.md,
"CNNs load numba"); ResNet-50's peak memory 274 → 378 MiB.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from onnxplug.kernels import current_run

__all__ = [
    "avx512_module",
    "compiler",
    "cpu_has",
    "direct_call",
    "load_for_feature_maps",
    "numba_loaded",
    "switched_on",
]


def switched_on(name: str) -> bool:
    """Whether the environment switch ``name`` (``ONNXPLUG_CPU_JIT``, ``ONNXPLUG_CPU_CONV_TILE``,
    ``ONNXPLUG_CPU_TEAM``, …) is not ``0``: read once per session run and kept in its notes, else
    on every call.  Why: the kernels ask several switches on every layer, and each read of
    ``os.environ`` costs about 0.5 µs (encoding the name, decoding the value), a few µs a layer
    on models of small layers; a switch changed during a run applies from the next run."""
    run = current_run()
    if run is None:
        return os.environ.get(name, "1") != "0"
    value = run.notes.get(name)  # the switches' names are the notes' keys (no other note has one)
    if value is None:
        value = run.notes[name] = os.environ.get(name, "1") != "0"
    return value


def numba_loaded() -> bool:
    """Whether numba is imported in this process and not disabled (``ONNXPLUG_CPU_JIT=0``): a
    dict lookup, cheap enough to ask on every call."""
    return "numba" in sys.modules and switched_on("ONNXPLUG_CPU_JIT")


def load_for_feature_maps() -> bool:
    """Import numba, unless it is missing or disabled, for a session that convolves float32
    feature maps (see the module's docstring); whether the compiled loops are now available."""
    return compiler() is not None


def compiler(**options: Any) -> Callable[[Any], Any] | None:
    """numba's ``njit(cache=True, nogil=True, **options)``, or ``None`` without numba or with
    ``ONNXPLUG_CPU_JIT=0`` (read on each call: the modules cache what they build with it).
    ``error_model="numpy"`` drops the zero-division check numba puts in every division, which
    otherwise keeps a loop with a division from being vectorised; ``fastmath={"contract"}``
    lets a loop whose accuracy was checked with fused multiply-adds use them."""
    if os.environ.get("ONNXPLUG_CPU_JIT", "1") == "0":
        return None
    try:
        import numba
    except ImportError:
        return None
    _prefer_openmp(numba)
    return numba.njit(cache=True, nogil=True, **options)


@functools.cache
def _prefer_openmp(numba: Any) -> None:
    """Ask numba for its OpenMP threading layer, where the application chose none
    (``NUMBA_THREADING_LAYER``) and libgomp loads, before the first compiled loop starts a
    layer: numba's default order tries TBB first, and TBB is loadable wherever a library brought
    it into the process (``import openvino`` does), where the OCR recognizer's 2-thread runs took
    2.5 ms, its one-thread time, against 1.4 on OpenMP (docs/benchmarks.md, twenty-fifth
    session).  Without libgomp, numba's thread-safe choice (``kernels._team``)."""
    if os.environ.get("NUMBA_THREADING_LAYER") or numba.config.THREADING_LAYER != "default":
        return
    spin = _OPENMP_SPIN if not _libgomp_loaded() and not _OPENMP_WAIT_SET.intersection(os.environ) else None
    if spin is not None:
        os.environ["GOMP_SPINCOUNT"] = spin
    try:
        import numba.np.ufunc.omppool  # loads libgomp, which reads its settings now and only now
    except ImportError:
        numba.config.THREADING_LAYER = "threadsafe"
        return
    finally:
        if spin is not None:
            del os.environ["GOMP_SPINCOUNT"]  # (for libgomp only: not for child processes)
    numba.config.THREADING_LAYER = "omp"


#: The spin count the team's idle threads wait with before they sleep, where the application set
#: none (``GOMP_SPINCOUNT``, ``OMP_WAIT_POLICY``): about 20 ms of one core's spinning after a
#: parallel region, as onnxruntime's threads spin after a run.  Why: libgomp's default (300000,
#: a few ms) lets them sleep between calls, and on this project's virtual machines waking a
#: sleeping team cost milliseconds: a small convolution's first run after 100 ms idle 7.3 ms
#: against 0.6 (1.09 with this count; onnxruntime 1.09), SqueezeNet and the OCR recognizer
#: after 300 ms idle up to 14-17 ms against 2-2.5 (docs/benchmarks.md, twenty-fifth session).
_OPENMP_SPIN = "1000000"
_OPENMP_WAIT_SET = frozenset({"GOMP_SPINCOUNT", "OMP_WAIT_POLICY"})


def _libgomp_loaded() -> bool:
    """Whether libgomp is in the process already (its settings then stay as they are)."""
    try:
        with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
            return any("libgomp" in line for line in maps)
    except OSError:
        return False


@functools.cache
def avx512_module(name: str) -> Any | None:
    """The kernel module ``kernels.<name>`` whose loops are written for AVX-512F (imported on this
    first call: it compiles or loads its loops), or ``None`` without numba, with
    ``ONNXPLUG_CPU_JIT=0`` or on a CPU without AVX-512F.  Callers cache the answer."""
    if compiler() is None or not cpu_has(("avx512f",), ("avx512f",)):
        return None
    return importlib.import_module(f".{name}", __package__)


@functools.cache
def cpu_has(flags: tuple[str, ...], llvm_names: tuple[str, ...]) -> bool:
    """Whether the CPU has every instruction-set ``flags`` (as /proc/cpuinfo spells them): from
    /proc/cpuinfo where there is one (no import: asked for every session), else from LLVM's host
    features under ``llvm_names``.  For the AVX-512 tiles that numba's LLVM emits."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            for line in info:
                if line.startswith("flags"):
                    present = set(line.split(":", 1)[1].split())
                    return all(flag in present for flag in flags)
    except OSError:
        pass
    try:
        import llvmlite.binding as llvm
    except ImportError:
        return False
    features = llvm.get_host_cpu_features()
    return all(features.get(name, False) for name in llvm_names)


@functools.cache
def direct_call(dispatcher: Callable[..., Any]) -> Callable[..., Any]:
    """The compiled entry point of ``dispatcher``, a numba function compiled for one explicit
    signature, or ``dispatcher`` itself where it has another number of signatures.

    Why: numba's dispatcher works out the type of every argument on each call to pick an
    overload, ~0.5 µs for a convolution's 28 arguments (1.53 against 1.04 µs for an 8-channel
    4×4 layer), a sixth of a small layer's fixed cost.  The entry point skips that, and with it
    the checks: it refuses an array of another element type, but takes one of another number of
    dimensions or a strided one as if it were C-contiguous.  So only a caller that passes
    arguments it has already passed through the dispatcher (the same objects), or arrays it has
    just made C-contiguous, of the signature's type and rank, may use it (``BoundLayer``'s kept
    call)."""
    signatures = getattr(dispatcher, "signatures", ())
    if len(signatures) != 1:
        return dispatcher
    try:
        return dispatcher.get_overload(signatures[0])
    except (AttributeError, KeyError, TypeError):  # another numba's dispatcher: keep the checked call
        return dispatcher

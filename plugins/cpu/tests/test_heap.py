"""onnxplug_cpu.heap: with use_arena on (the default), a freed large buffer's pages are reused by the next
allocation instead of being mapped and faulted in again.  Each case runs in a fresh process,
since the malloc settings are process-wide and made once."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="the heap settings are glibc's"
)

# Creates a CPU session (which configures malloc unless disabled), then counts the minor page
# faults of a second 16 MiB malloc + memset after the first was freed.  Plain libc calls keep
# numpy's hugepage advice out of the count.
_PROBE = r"""
import ctypes, ctypes.util, json, resource, sys
import onnx, onnx.helper as oh
import onnxplug
node = oh.make_node("Relu", ["x"], ["y"])
graph = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
                      [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
options = json.loads(sys.argv[1])
onnxplug.InferenceSession(model.SerializeToString(), providers=[("CPUExecutionProvider", options)])
from onnxplug_cpu.heap import freed_heap_kept
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
size = 16 << 20
block = libc.malloc(size); ctypes.memset(block, 1, size); libc.free(block)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
block = libc.malloc(size); ctypes.memset(block, 1, size)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
libc.free(block)
print(json.dumps({"set": freed_heap_kept(), "faults": faults}))
"""


def probe(options: dict, **env) -> dict:
    base = {k: v for k, v in os.environ.items() if k != "ONNXPLUG_CPU_ARENA"}
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(options)],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("env", [{}, {"ONNXPLUG_CPU_ARENA": "1"}])
def test_freed_blocks_are_reused_without_faults(env):
    got = probe({}, **env)
    assert got["set"] is True
    assert got["faults"] < 64, got  # 16 MiB is 4096 pages of 4 KiB


@pytest.mark.parametrize(
    "options,env",
    [
        ({"use_arena": "0"}, {"ONNXPLUG_CPU_ARENA": "1"}),
        ({"use_arena": "false"}, {}),
        ({}, {"ONNXPLUG_CPU_ARENA": "0"}),
    ],
)
def test_use_arena_off_leaves_malloc_alone(options, env):
    got = probe(options, **env)
    assert got["set"] is False
    assert got["faults"] >= 1024, got  # mapped afresh: every page faulted in again

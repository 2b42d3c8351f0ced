"""A model over 2 GiB (weights in external data) loads from its path in far less than its size
of memory: the weights are memory-mapped and only the pages a kernel touches are read."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import onnx
from onnx import TensorProto, helper

ELEMENTS = (1 << 29) + (1 << 20)  # 2.0 GiB + 4 MiB of float32


def test_model_over_2gib_loads_from_path(tmp_path):
    weights = tmp_path / "weights.bin"
    with open(weights, "wb") as handle:  # a sparse file: no disk blocks behind it
        handle.truncate(ELEMENTS * 4)
    tensor = TensorProto(name="big", data_type=TensorProto.FLOAT, dims=[ELEMENTS])
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "weights.bin"), ("offset", "0"), ("length", str(ELEMENTS * 4))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    nodes = [
        helper.make_node("Shape", ["big"], ["size"]),
        helper.make_node("Slice", ["big", "start", "stop"], ["head"]),
    ]
    graph = helper.make_graph(
        nodes,
        "large",
        [],
        [
            helper.make_tensor_value_info("size", TensorProto.INT64, [1]),
            helper.make_tensor_value_info("head", TensorProto.FLOAT, [4]),
        ],
        [
            tensor,
            helper.make_tensor("start", TensorProto.INT64, [1], [0]),
            helper.make_tensor("stop", TensorProto.INT64, [1], [4]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, tmp_path / "model.onnx")
    # VmHWM, the peak of this process's own memory: ru_maxrss would also count the parent's
    # peak, which Linux carries across fork and exec (a large pytest process fails the check).
    script = textwrap.dedent(f"""
        import onnxplug
        session = onnxplug.InferenceSession({str(tmp_path / "model.onnx")!r})
        size, head = session.run(None, {{}})
        assert size.tolist() == [{ELEMENTS}] and head.tolist() == [0.0] * 4, (size, head)
        with open("/proc/self/status") as status:
            print(next(line.split()[1] for line in status if line.startswith("VmHWM:")))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    peak_kib = int(done.stdout.strip().splitlines()[-1])
    assert peak_kib < 1024 * 1024, f"peak RSS {peak_kib} KiB for a {ELEMENTS * 4} byte model"

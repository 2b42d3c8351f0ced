"""Golden partition tests with fake providers: who runs what, which claims are refused, copies."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.api import FuseClaim, KernelClaim
from onnxplug.testing import make_model
from onnxplug.testing.fakes import FakeFactory, fake_plugin

F = TensorProto.FLOAT
X = np.array([[-1.0, 2.0], [3.0, -4.0]], np.float32)


def _chain_model() -> bytes:
    """x → Relu(r) → Neg(n) → Add(a, with x) → Mul(m, with r) → Sigmoid(y)."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="r"),
        helper.make_node("Neg", ["r"], ["n"], name="n"),
        helper.make_node("Add", ["n", "x"], ["a"], name="a"),
        helper.make_node("Mul", ["a", "r"], ["m"], name="m"),
        helper.make_node("Sigmoid", ["m"], ["y"], name="y"),
    ]
    return make_model(nodes, [("x", F, [2, 2])], [("y", F, [2, 2])]).SerializeToString()


CHAIN = _chain_model()
CPU_RESULT = onnxplug.InferenceSession(CHAIN).run(None, {"x": X})[0]


def _ops(*ops: str):
    return lambda graph, kernels: [KernelClaim(n.name) for n in graph.nodes if n.op_type in ops]


def _session(model: bytes, *factories: FakeFactory, providers=None):
    env = onnxplug.Environment()
    env.register(fake_plugin(*factories), name="fakes")
    names = providers or [f.ort_name for f in factories]
    return onnxplug.InferenceSession(model, providers=names, environment=env)


def _assignment(session) -> dict[str, str]:
    """Node → short name of the provider running it, from the public partition report."""
    short = {"CPUExecutionProvider": "cpu"}
    short.update({name: name.removesuffix("ExecutionProvider").lower() for name in session.get_providers()})
    return {node.name: short[node.provider] for node in session.get_partition_report().nodes}


def test_overlapping_claims_first_provider_wins():
    first = FakeFactory("first", _ops("Relu", "Add"))
    second = FakeFactory("second", _ops("Relu", "Add", "Mul"))
    session = _session(CHAIN, first, second)
    assert _assignment(session) == {"r": "first", "n": "cpu", "a": "first", "m": "second", "y": "cpu"}
    np.testing.assert_allclose(session.run(None, {"x": X})[0], CPU_RESULT, rtol=1e-6)
    assert first.calls["Relu"] == 1 and second.calls["Mul"] == 1 and second.calls["Relu"] == 0


def test_provider_order_from_the_user_decides():
    first = FakeFactory("first", _ops("Relu", "Add"))
    second = FakeFactory("second", _ops("Relu", "Add", "Mul"))
    session = _session(CHAIN, first, second, providers=[second.ort_name, first.ort_name])
    assert _assignment(session) == {"r": "second", "n": "cpu", "a": "second", "m": "second", "y": "cpu"}


def test_non_convex_fuse_claim_is_split_with_a_warning():
    # {r, a} is not convex: r → n (outside) → a.
    fuser = FakeFactory("fuser", lambda graph, kernels: [FuseClaim(("r", "a", "m"))])
    with pytest.warns(UserWarning, match=r"provider 'fuser' claimed a non-convex set of 3 nodes.*split into 2"):
        session = _session(CHAIN, fuser)
    fused = {name: sorted(nodes) for name, nodes in session.get_partition_report().partitions.items()}
    assert sorted(fused.values()) == [["a", "m"], ["r"]]
    np.testing.assert_allclose(session.run(None, {"x": X})[0], CPU_RESULT, rtol=1e-6)
    assert fuser.calls["partition"] == 2


def test_convex_fuse_claim_is_one_partition():
    fuser = FakeFactory("fuser", lambda graph, kernels: [FuseClaim(("r", "n", "a"), name="head")])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        session = _session(CHAIN, fuser)
    assert {name: sorted(nodes) for name, nodes in session.get_partition_report().partitions.items()} == {
        "head": ["a", "n", "r"]
    }
    assert session.partition_counts() == {"FuserExecutionProvider": 3, "CPUExecutionProvider": 2}
    np.testing.assert_allclose(session.run(None, {"x": X})[0], CPU_RESULT, rtol=1e-6)


def test_fuse_claim_overlapping_kernel_claims_keeps_the_free_nodes():
    claims = FakeFactory("claims", _ops("Relu"))
    fuser = FakeFactory("fuser", lambda graph, kernels: [FuseClaim(("r", "n", "a"))])
    session = _session(CHAIN, claims, fuser)
    assert _assignment(session) == {"r": "claims", "n": "fuser", "a": "fuser", "m": "cpu", "y": "cpu"}
    np.testing.assert_allclose(session.run(None, {"x": X})[0], CPU_RESULT, rtol=1e-6)


def test_provider_whose_capability_raises_is_skipped():
    def broken(graph, kernels):
        raise RuntimeError("driver crashed")

    with pytest.warns(UserWarning, match=r"provider 'broken' failed in capability\(\).*driver crashed"):
        session = _session(CHAIN, FakeFactory("broken", broken))
    assert session.partition_counts() == {"CPUExecutionProvider": 5}
    np.testing.assert_allclose(session.run(None, {"x": X})[0], CPU_RESULT, rtol=1e-6)


def test_claim_without_kernel_is_refused():
    greedy = FakeFactory("greedy", _ops("Sigmoid", "Relu", "Softmax"))
    model = make_model(
        [helper.make_node("Softmax", ["x"], ["y"], name="sm")], [("x", F, [2, 2])], [("y", F, [2, 2])]
    ).SerializeToString()
    with pytest.warns(UserWarning, match=r"provider 'greedy' claimed node 'sm' .*Softmax.* no kernel"):
        session = _session(model, greedy)
    assert _assignment(session) == {"sm": "cpu"}


def test_claim_of_unknown_node_is_ignored():
    ghost = FakeFactory("ghost", lambda graph, kernels: [KernelClaim("no_such_node")])
    with pytest.warns(UserWarning, match="claimed node 'no_such_node', which is not in the graph"):
        session = _session(CHAIN, ghost)
    assert session.partition_counts() == {"CPUExecutionProvider": 5}


def test_claims_inside_if_and_loop_bodies():
    relu_body = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["out"])], "relu_branch", [], [helper.make_tensor_value_info("out", F, [2, 2])]
    )
    neg_body = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["out2"])], "neg_branch", [], [helper.make_tensor_value_info("out2", F, [2, 2])]
    )
    loop_body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Relu", ["acc_in"], ["relu_acc"]),
            helper.make_node("Add", ["relu_acc", "x"], ["acc_out"]),
        ],
        "loop_body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", F, [2, 2]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", F, [2, 2]),
        ],
    )
    nodes = [
        helper.make_node("If", ["c"], ["branch"], then_branch=relu_body, else_branch=neg_body),
        helper.make_node("Loop", ["trips", "", "branch"], ["looped"], body=loop_body),
    ]
    model = make_model(
        nodes,
        [("c", TensorProto.BOOL, []), ("x", F, [2, 2]), ("trips", TensorProto.INT64, [])],
        [("looped", F, [2, 2])],
    ).SerializeToString()
    feeds = {"c": np.array(True), "x": X, "trips": np.array(3, np.int64)}
    expected = onnxplug.InferenceSession(model).run(None, feeds)[0]
    fake = FakeFactory("inner", _ops("Relu", "Add"))
    session = _session(model, fake)
    np.testing.assert_allclose(session.run(None, feeds)[0], expected, rtol=1e-6)
    assert fake.calls["Relu"] == 1 + 3 and fake.calls["Add"] == 3


def test_copies_are_inserted_at_device_borders():
    device = FakeFactory("device", _ops("Relu", "Add", "Sigmoid"), device_memory=True)
    session = _session(CHAIN, device)
    copies = [str(c) for c in session.get_partition_report().copies]
    # r lives on the device; n (CPU) needs it on the host, and so does m; a (device) needs n and x.
    assert copies == [
        "x: host -> DeviceExecutionProvider",
        "r: DeviceExecutionProvider -> host",
        "n: host -> DeviceExecutionProvider",
        "a: DeviceExecutionProvider -> host",
        "m: host -> DeviceExecutionProvider",
        "y: DeviceExecutionProvider -> host",
    ]
    np.testing.assert_allclose(session.run(None, {"x": X})[0], CPU_RESULT, rtol=1e-6)


def test_constants_are_copied_to_the_device_once():
    device = FakeFactory("device", _ops("Add"), device_memory=True)
    model = make_model(
        [helper.make_node("Add", ["x", "w"], ["y"])], [("x", F, [2])], [("y", F, [2])], {"w": np.ones(2, np.float32)}
    ).SerializeToString()
    session = _session(model, device)
    copies = [(str(c), c.how) for c in session.get_partition_report().copies]
    assert copies == [
        ("x: host -> DeviceExecutionProvider", "run"),
        ("w: host -> DeviceExecutionProvider", "build"),  # once, when the session is created
        ("y: DeviceExecutionProvider -> host", "run"),
    ]
    for _ in range(2):
        np.testing.assert_array_equal(session.run(None, {"x": np.array([1, 2], np.float32)})[0], [2, 3])


def test_fused_partition_on_device_memory():
    device = FakeFactory("device", lambda graph, kernels: [FuseClaim(("n", "a", "m"))], device_memory=True)
    session = _session(CHAIN, device)
    np.testing.assert_allclose(session.run(None, {"x": X})[0], CPU_RESULT, rtol=1e-6)
    assert device.calls["partition"] == 1


def test_unclaimed_node_error_lists_every_provider_reason():
    def decline(graph, kernels):
        for node in graph.nodes:
            graph.decline(node, "not on this chip")
        return []

    env = onnxplug.Environment(block=["cpu"])
    env.register(fake_plugin(FakeFactory("picky", decline)), name="picky")
    with pytest.raises(onnxplug.NotImplemented, match=r"Relu.*PickyExecutionProvider: not on this chip"):
        onnxplug.InferenceSession(CHAIN, providers=["PickyExecutionProvider"], environment=env)


class _BrokenCompiler(FakeFactory):
    def create(self, device, options):
        provider = super().create(device, options)

        def refuse(partition):
            raise RuntimeError("compiler ran out of registers")

        provider.compile = refuse
        return provider


def test_partition_that_fails_to_compile_falls_back_with_a_warning():
    broken = _BrokenCompiler("broken", lambda graph, kernels: [FuseClaim(("r", "n", "a"))])
    with pytest.warns(UserWarning, match=r"provider 'broken' failed to compile partition .*registers.*fall back"):
        session = _session(CHAIN, broken)
    report = session.get_partition_report()
    assert {node.provider for node in report.nodes} == {"CPUExecutionProvider"}
    assert session.partition_counts() == {"CPUExecutionProvider": 5} and not report.partitions
    np.testing.assert_allclose(session.run(None, {"x": X})[0], CPU_RESULT, rtol=1e-6)


def test_compile_failure_without_fallback_is_epfail():
    broken = _BrokenCompiler("broken", lambda graph, kernels: [FuseClaim(("r", "n", "a"))])
    env = onnxplug.Environment()
    env.register(fake_plugin(broken), name="fakes")
    with pytest.raises(
        onnxplug.EPFail,
        match=r"failed to compile partition broken_partition_0 \(r, n, a\): RuntimeError: compiler ran out",
    ):
        onnxplug.InferenceSession(CHAIN, providers=[broken.ort_name], environment=env, enable_fallback=0)


@pytest.mark.parametrize("dlpack", [False, True], ids=["host-hop", "dlpack"])
def test_copies_between_two_devices(dlpack):
    first = FakeFactory("first", _ops("Relu"), device_memory=True)
    second = FakeFactory("second", _ops("Neg"), device_memory=True, dlpack=dlpack)
    session = _session(CHAIN, first, second)
    copies = {str(c): c.how for c in session.get_partition_report().copies}
    assert copies["r: FirstExecutionProvider -> SecondExecutionProvider"] == ("dlpack" if dlpack else "via host")
    np.testing.assert_allclose(session.run(None, {"x": X})[0], CPU_RESULT, rtol=1e-6)
    assert second.transfer.dlpack_imports == (1 if dlpack else 0)


def test_fused_partition_with_a_subgraph_takes_its_outer_values_as_inputs():
    then_graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["t"])], "then", [], [helper.make_tensor_value_info("t", F, [2, 2])]
    )
    else_graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", F, [2, 2])]
    )
    nodes = [helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then_graph, else_branch=else_graph)]
    model = make_model(nodes, [("c", TensorProto.BOOL, []), ("x", F, [2, 2])], [("y", F, [2, 2])]).SerializeToString()
    fuser = FakeFactory("fuser", lambda graph, kernels: [FuseClaim(("branch",))])
    session = _session(model, fuser)
    step = next(s for s in session._plan.steps if s.op_type == "FusedPartition")
    assert len(step.inputs) == 2  # c, and x read inside the branches
    np.testing.assert_array_equal(session.run(None, {"c": np.array(False), "x": X})[0], -X)


def test_a_fused_if_that_fails_to_compile_runs_its_branches_with_kernels():
    # the If's branches were left to the compiler; after the fallback they are partitioned too
    branch = lambda op, out: helper.make_graph(  # noqa: E731
        [helper.make_node(op, ["x"], [out])], out, [], [helper.make_tensor_value_info(out, F, [2])]
    )
    nodes = [
        helper.make_node("If", ["c"], ["y"], name="if", then_branch=branch("Relu", "t"), else_branch=branch("Neg", "e"))
    ]
    model = make_model(nodes, [("c", TensorProto.BOOL, []), ("x", F, [2])], [("y", F, [2])]).SerializeToString()
    broken = _BrokenCompiler(
        "broken", lambda graph, kernels: [FuseClaim([n.name for n in graph.nodes if n.op_type == "If"])]
    )
    with pytest.warns(UserWarning, match="fall back"):
        session = _session(model, broken)
    x = np.array([-1, 2], np.float32)
    np.testing.assert_array_equal(session.run(None, {"c": np.array(True), "x": x})[0], [0, 2])
    np.testing.assert_array_equal(session.run(None, {"c": np.array(False), "x": x})[0], [1, -2])

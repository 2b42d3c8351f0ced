"""The free names the folding rules give the weights they write (``onnxplug_cpu.rule_values``)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxplug_cpu.rule_values import FreshNames, fresh_initializer_names


def _graph() -> ir.Graph:
    x = ir.Value(name="x")
    weight = ir.Value(name="w_bn", const_value=ir.Tensor(np.ones(2, np.float32), name="w_bn"))
    node = ir.Node("", "Relu", [x], num_outputs=1)
    node.outputs[0].name = "w_bn_1"
    return ir.Graph([x], node.outputs, nodes=[node], initializers=[weight])


def test_names_avoid_the_graph_s_values_and_each_other():
    graph = _graph()
    assert fresh_initializer_names(graph, "w_bn", "w_bn", "y") == ("w_bn_2", "w_bn_3", "y")


def test_one_pass_reads_the_graph_once_and_remembers_what_it_handed_out():
    graph, fresh = _graph(), FreshNames()
    assert fresh(graph, "w_bn") == ("w_bn_2",)
    assert fresh(graph, "w_bn") == ("w_bn_3",)  # not written into the graph yet: still taken
    # an initializer another rule added after the first read is avoided (what fusions write)
    extra = ir.Value(name="other", const_value=ir.Tensor(np.ones(1, np.float32), name="other"))
    graph.register_initializer(extra)
    assert fresh(graph, "other") == ("other_1",)

"""``onnxplug partition``: the text report and the HTML picture, built on the public report."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re

import onnx.backend.test
import pytest

import onnxplug
from onnxplug.cli import main
from onnxplug.cli._html import page_data, render_html

LIGHT = pathlib.Path(onnx.backend.test.__file__).parent / "data" / "light"
SQUEEZENET = LIGHT / "light_squeezenet.onnx"
VIRTUAL = "VirtualDeviceExecutionProvider,CPUExecutionProvider"


def _embedded(page: str) -> dict:
    match = re.search(r'<script type="application/json" id="onnxplug-data">(.*?)</script>', page, re.S)
    assert match, "the page embeds its data"
    return json.loads(match.group(1))


@pytest.fixture(scope="module")
def squeezenet_html(tmp_path_factory):
    """The picture of squeezenet on the CPU provider: its graph has ConstantOfShape nodes that
    are folded into constants (the picture used to crash on them with a KeyError)."""
    out = tmp_path_factory.mktemp("html") / "squeezenet.html"
    assert main(["partition", str(SQUEEZENET), "--html", str(out)]) == 0
    return out.read_text(encoding="utf-8")


def test_html_of_a_light_model_with_folded_constants(squeezenet_html):
    report = onnxplug.InferenceSession(str(SQUEEZENET)).get_partition_report()
    data = _embedded(squeezenet_html)
    ops = [n for n in data["nodes"] if n["kind"] == "op"]
    assert [n["name"] for n in ops] == [n.name for n in report.nodes]
    drawn = {n["name"] for n in data["nodes"]}
    assert not drawn & set(report.constants), "constants and initializers are never drawn"
    ids = {n["id"] for n in data["nodes"]}
    assert all(source in ids and target in ids for source, target, _ in data["edges"])
    assert {n["name"] for n in data["nodes"] if n["kind"] == "input"} == set(report.graph_inputs)
    assert data["counts"] == report.counts


def test_page_is_self_contained(squeezenet_html):
    assert "dagre" in squeezenet_html and "graphlib" in squeezenet_html  # the layout engine is inlined
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=|https?://(?!www\.w3\.org)", squeezenet_html)


def test_text_report_counts_agree(capsys):
    assert main(["partition", str(SQUEEZENET), "--providers", VIRTUAL]) == 0
    text = capsys.readouterr().out
    total = int(re.search(r": (\d+) nodes, \d+ constants", text).group(1))
    per_provider = [int(n) for n in re.findall(r"^\w+ExecutionProvider: (\d+) nodes?$", text, re.M)]
    assert len(per_provider) == 2 and sum(per_provider) == total
    assert "(?)" not in text  # every declined node named runs somewhere (folding came before)
    assert not re.search(r"declined \S+ \(\?\)", text)


def test_copies_and_declined_reasons_are_drawn():
    session = onnxplug.InferenceSession(str(SQUEEZENET), providers=VIRTUAL.split(","))
    report = session.get_partition_report()
    assert report.copies, "the virtual device needs copies around its nodes"
    data = page_data(report)
    copies = [n for n in data["nodes"] if n["kind"] == "copy"]
    assert len(copies) == len(report.copies)
    by_id = {n["id"]: n for n in data["nodes"]}
    for copy in copies:  # each copy sits between its value's producer and readers on its target
        into = [by_id[s] for s, t, _ in data["edges"] if t == copy["id"]]
        out = [by_id[t] for s, t, _ in data["edges"] if s == copy["id"]]
        assert len(into) == 1 and out
        if copy["target"] in report.providers:
            assert all(n["provider"] == copy["target"] for n in out)
    declined = [n for n in data["nodes"] if n["kind"] == "op" and n["declined"]]
    assert declined and all(r.startswith("VirtualDeviceExecutionProvider: ") for n in declined for r in n["declined"])


def test_fused_partitions_get_their_own_colours():
    pytest.importorskip("openvino", reason="the OpenVINO provider (which fuses partitions) needs openvino")
    session = onnxplug.InferenceSession(str(SQUEEZENET), providers=["OpenVINOExecutionProvider"])
    report = session.get_partition_report()
    data = _embedded(render_html(report))
    assert set(data["partitions"]) == set(report.partitions) and report.partitions
    assert len(set(data["partitions"].values())) == len(data["partitions"])
    assert {n["partition"] for n in data["nodes"] if n["kind"] == "op"} <= set(report.partitions)


def test_script_cannot_be_ended_by_a_value_name():
    report = onnxplug.InferenceSession(str(SQUEEZENET)).get_partition_report()
    hostile = "</script><b>x\u2028"
    first = dataclasses.replace(report.nodes[0], name=hostile)
    page = render_html(dataclasses.replace(report, nodes=(first, *report.nodes[1:])), title=hostile)
    assert "</script><b>x" not in page
    assert _embedded(page)["nodes"][1]["name"] == hostile

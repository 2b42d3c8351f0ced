"""Plans of real models against checked-in golden reports: the light models of the onnx wheel,
a BERT transformer and two quantized convnets, for each target; and the command-line outputs.

A golden file is the plan's text (``TargetPlan.lines``).  After a deliberate change (a table row,
the planner), regenerate them with ``ONNXPLUG_REGEN_GOLDEN=1 pytest tests/targets/test_golden.py``
and review the diff: it is the change in what each provider would run.
"""

from __future__ import annotations

import os
import pathlib

import onnx
import onnx.backend.test
import pytest
import target_models

from onnxplug.cli import main
from onnxplug.partition.targets import check_usability, plan_for_target
from onnxplug.tools import check_model_usability

HERE = pathlib.Path(__file__).resolve().parent
GOLDEN = HERE / "golden"
LIGHT = pathlib.Path(onnx.backend.test.__file__).parent / "data" / "light"
BERT = HERE.parent / "data" / "transformers" / "bert.torchscript.onnx"
TARGETS = ("tensorrt", "directml", "nnapi", "coreml")
REGEN = os.environ.get("ONNXPLUG_REGEN_GOLDEN") == "1"

QUICK_LIGHT = ("resnet50", "squeezenet")
SLOW_LIGHT = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "shufflenet", "vgg19", "zfnet512")


def _model(name: str) -> bytes | str:
    if name == "bert":
        return str(BERT)
    if name in ("qdq_convnet", "qoperator_convnet"):
        return getattr(target_models, name)().SerializeToString()
    return str(LIGHT / f"light_{name}.onnx")


def _compare(path: pathlib.Path, text: str) -> None:
    if REGEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no golden report {path.name}: run with ONNXPLUG_REGEN_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8")


def _check(target: str, name: str) -> None:
    plan = plan_for_target(_model(name), target)
    _compare(GOLDEN / target / f"{name}.txt", "\n".join(plan.lines(name)) + "\n")
    assert len(plan.claimed) + len(plan.fallback) == len(plan.report.nodes)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", [*QUICK_LIGHT, "bert", "qdq_convnet", "qoperator_convnet"])
def test_plan_matches_golden(target, name):
    _check(target, name)


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", SLOW_LIGHT)
def test_plan_of_every_light_model_matches_golden(target, name):
    _check(target, name)


@pytest.mark.parametrize("target", TARGETS)
def test_cli_target_prints_the_plan(target, capsys):
    model = LIGHT / "light_resnet50.onnx"
    assert main(["partition", str(model), "--target", target]) == 0
    out = capsys.readouterr().out
    _compare(GOLDEN / "cli" / f"partition_resnet50_{target}.txt", out.replace(str(model), "light_resnet50.onnx"))
    plan = plan_for_target(str(model), target)  # the Python API says the same
    assert out.replace(str(model), "M") == "\n".join(plan.lines("M")) + "\n"


def test_cli_target_html_and_errors(tmp_path, capsys):
    out = tmp_path / "plan.html"
    model = str(LIGHT / "light_squeezenet.onnx")
    assert main(["partition", model, "--target", "nnapi", "--html", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert "NnapiExecutionProvider" in page and "plan for NnapiExecutionProvider" in page
    capsys.readouterr()
    assert main(["partition", model, "--target", "nosuch"]) == 1
    assert "no capability table for target 'nosuch'" in capsys.readouterr().err
    assert main(["partition", model, "--target", "nnapi", "--providers", "cpu"]) == 1
    assert "cannot be given --providers" in capsys.readouterr().err


def test_check_model_usability_runs_the_planner(capsys):
    model = str(LIGHT / "light_resnet50.onnx")
    assert check_model_usability.main([model, "--target", "nnapi"]) == 0
    out = capsys.readouterr().out
    assert "nnapi would run 160 of 176 nodes (91%) in 17 partitions" in out
    assert "Sum x16: ai.onnx::Sum is not in the nnapi table" in out
    assert check_usability(model, target="nnapi", argv=["--require-all"]) == 1
    squeezenet = str(LIGHT / "light_squeezenet.onnx")
    assert check_usability(squeezenet, target="nnapi", argv=["--require-all"]) == 0
    capsys.readouterr()
    assert check_model_usability.main([model, "--target", "coreml"]) == 0  # the CoreML plugin's table
    assert "coreml would run 176 of 176 nodes (100%) in 1 partition" in capsys.readouterr().out
    assert check_usability(model, target="webgpu") == 2
    assert "no capability table for target 'webgpu'" in capsys.readouterr().err


def test_dims_fix_free_dimensions_for_static_shape_targets(tmp_path, capsys):
    model = target_models.single_node("Relu", [("x", "float", ["n", 3])], [("y", "float", ["n", 3])])
    path = tmp_path / "dynamic.onnx"
    onnx.save(model, path)
    dynamic = plan_for_target(str(path), "nnapi")
    assert not dynamic.claimed
    assert "hint: the target needs static shapes" in "\n".join(dynamic.lines("m"))
    assert plan_for_target(str(path), "nnapi", dims={"n": 2}).fully_supported
    assert main(["partition", str(path), "--target", "nnapi", "--dim", "n=2"]) == 0
    assert "nnapi would run 1 of 1 nodes (100%)" in capsys.readouterr().out
    assert main(["partition", str(path), "--target", "nnapi", "--dim", "batch=2"]) == 1
    assert "no free dimension named batch" in capsys.readouterr().err
    assert main(["partition", str(path), "--target", "nnapi", "--dim", "n"]) == 1
    assert "--dim takes NAME=VALUE" in capsys.readouterr().err

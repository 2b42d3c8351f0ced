"""Whole models to ``.mlpackage`` on Linux: the onnx wheel's light models and BERT encoders
convert, save and reload, and their specs pass coremltools' own validation (the saved ML
Program is loaded back into MIL by coremltools' ``milproto`` frontend, which type-checks every
op).  The BERT encoder is also checked numerically: its whole graph, fed as constants, is
computed by MIL's value inference and compared with torch's outputs stored next to it.  Packages
per partition land in the compile cache by content and options.  Prediction needs macOS: those
tests are skipped here with that reason (not exercised in CI)."""

from __future__ import annotations

import os
import pathlib
import sys

import numpy as np
import onnx
import pytest

pytest.importorskip("coremltools", reason="converting to ML Programs needs coremltools")

import coremltools as ct
from coremltools.converters.mil.frontend.milproto.load import load as load_mil

from onnxplug import CompileCache
from onnxplug.api import Partition
from onnxplug_coreml.package import Settings, build_package, convert_model, io_specs, package_key
from onnxplug_coreml.translate import Untranslatable, translate

LIGHT = pathlib.Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
TRANSFORMERS = pathlib.Path(__file__).resolve().parents[3] / "tests" / "data" / "transformers"
QUICK = ["squeezenet", "resnet50"]
SLOW = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "shufflenet", "vgg19", "zfnet512"]
MACOS_ONLY = pytest.mark.skipif(sys.platform != "darwin", reason="CoreML prediction needs macOS")


def _validate(path: str, model: onnx.ModelProto) -> None:
    """Reload the package and have coremltools rebuild (and type-check) its MIL program."""
    reloaded = ct.models.MLModel(path, skip_model_load=True)
    spec = reloaded.get_spec()
    assert spec.WhichOneof("Type") == "mlProgram"
    program = load_mil(spec, spec.specificationVersion, file_weights_dir=reloaded.weights_dir)
    outputs = program.functions["main"].outputs
    inputs, described = io_specs(reloaded)
    assert [s.onnx_name for s in described] == [o.name for o in model.graph.output]
    assert [tuple(v.shape) for v in outputs] == [s.shape for s in described]
    assert [i.name for i in spec.description.input] == [s.mil_name for s in inputs]
    assert [o.name for o in spec.description.output] == [s.mil_name for s in described]  # what the runner reads


@pytest.mark.parametrize("name", QUICK + [pytest.param(n, marks=pytest.mark.slow) for n in SLOW])
def test_light_models_convert_save_reload_and_validate(name, tmp_path):
    path = convert_model(str(LIGHT / f"light_{name}.onnx"), str(tmp_path / f"{name}.mlpackage"))
    assert (pathlib.Path(path) / "Manifest.json").exists()
    _validate(path, onnx.load(str(LIGHT / f"light_{name}.onnx")))


def _bert(exporter: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray], np.ndarray]:
    model = onnx.load(str(TRANSFORMERS / f"bert.{exporter}.onnx"))
    data = np.load(TRANSFORMERS / "bert.npz")
    feeds = {i.name: data[i.name] for i in model.graph.input}
    for value in model.graph.input:  # fix batch and sequence to the sample's (Core ML programs are fixed-shape)
        for dim, size in zip(value.type.tensor_type.shape.dim, feeds[value.name].shape):
            dim.dim_value = size
    for value in model.graph.output:
        for dim in value.type.tensor_type.shape.dim:
            dim.ClearField("dim_param")
    del model.graph.value_info[:]
    return model, feeds, data["out:last_hidden_state"]


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_bert_encoder_converts_saves_and_validates(exporter, tmp_path):
    model, _, expected = _bert(exporter)
    path = convert_model(model, str(tmp_path / "bert.mlpackage"), Settings(precision="FP16", target="iOS16"))
    _validate(path, model)
    inputs, outputs = io_specs(ct.models.MLModel(path, skip_model_load=True))
    assert [(s.onnx_name, s.io_dtype, s.shape) for s in inputs] == [
        ("input_ids", "int32", (2, 8)),
        ("attention_mask", "int32", (2, 8)),
    ]
    assert [(s.onnx_name, s.shape) for s in outputs] == [("last_hidden_state", expected.shape)]


def test_bert_encoder_is_numerically_right_through_mil_value_inference():
    """The TorchScript export's every op has MIL value inference: the translated graph, fed the
    sample as constants, computes torch's output."""
    model, feeds, expected = _bert("torchscript")
    translated = translate(model, constant_inputs=feeds)
    np.testing.assert_allclose(np.asarray(translated.output_vars[0].val), expected, atol=1e-4)


def test_convert_fails_naming_every_untranslatable_node(tmp_path):
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [
            helper.make_node("Det", ["x"], ["d"], name="det"),
            helper.make_node("MaxPool", ["y"], ["p"], name="pool3d", kernel_shape=[2, 2, 2]),
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
        ],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, 4, 4]),
        ],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("d", "p", "r")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(Untranslatable, match="2 nodes") as raised:
        convert_model(model, str(tmp_path / "m.mlpackage"))
    assert "det: the translator has no MIL form for this op" in str(raised.value)
    assert "pool3d: only 2-D pooling is supported (rank-4 input): the input has rank 5" in str(raised.value)
    assert not (tmp_path / "m.mlpackage").exists()


def test_onnxplug_convert_command(tmp_path, capsys):
    from onnxplug.cli import main

    out = tmp_path / "squeezenet.mlpackage"
    model = str(LIGHT / "light_squeezenet.onnx")
    assert main(["convert", model, "--to", "coreml", "-o", str(out), "--option", "precision=FP16"]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    _validate(str(out), onnx.load(model))
    assert main(["convert", model, "--to", "coreml", "-o", str(tmp_path / "x.onnx")]) == 1
    assert "saved as a .mlpackage folder" in capsys.readouterr().err
    assert main(["convert", model, "--to", "webgpu", "-o", str(out)]) == 1
    assert "no converter for target 'webgpu'" in capsys.readouterr().err


def _partition() -> Partition:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"), helper.make_node("Relu", ["m"], ["y"], name="relu")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [onnx.numpy_helper.from_array(np.ones((4, 3), np.float32), "w")],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    return Partition("coreml_partition_0", ("mm", "relu"), ("x",), ("y",), model)


def _op_types(model) -> list[str]:
    function = model.get_spec().mlProgram.functions["main"]
    (block,) = function.block_specializations.values()
    return [op.type for op in block.operations]


def test_precision_fp16_computes_in_fp16_and_fp32_does_not():
    from onnxplug_coreml.package import convert

    partition = _partition()
    built = translate(partition.model, partition.inputs, partition.outputs)
    assert "cast" not in _op_types(convert(built, Settings(precision="FP32")))
    fp16 = _op_types(convert(built, Settings(precision="FP16")))
    assert fp16.count("cast") == 2 and fp16.index("cast") < fp16.index("matmul") < fp16.index("relu")


def test_packages_are_cached_by_partition_content_and_options(tmp_path):
    partition = _partition()
    cache = CompileCache(cache_dir=str(tmp_path / "cache"))
    first = build_package(partition, Settings(), cache, str(tmp_path / "a"))
    assert (cache.misses, cache.hits) == (1, 0)
    key = package_key(partition.model_bytes(), partition.inputs, partition.outputs, Settings())
    assert os.path.basename(first) == key + ".mlpackage"
    assert (tmp_path / "cache" / f"{key}.bin").exists()  # the session's compile_cache_dir holds it too
    _validate(first, partition.model)
    again = build_package(partition, Settings(compute_units="CPU_ONLY"), cache, str(tmp_path / "b"))
    assert (cache.misses, cache.hits) == (1, 1)  # compute units are chosen at load: same package
    assert os.path.basename(again) == os.path.basename(first)
    fp16 = build_package(partition, Settings(precision="FP16"), cache, str(tmp_path / "c"))
    assert cache.misses == 2 and fp16 != first
    other = CompileCache(cache_dir=str(tmp_path / "cache"))  # a new process: read from disk, not translated
    build_package(partition, Settings(), other, str(tmp_path / "d"))
    assert os.listdir(tmp_path / "d") == [key + ".mlpackage"]
    store = tmp_path / "store"
    build_package(partition, Settings(model_cache_dir=str(store)), CompileCache(), str(tmp_path / "e"))
    assert os.listdir(store) == [key + ".mlpackage"]  # onnxruntime's ModelCacheDirectory


@pytest.mark.skipif(sys.platform == "darwin", reason="checks the runner where Core ML cannot predict")
def test_runner_refuses_other_shapes_and_reports_core_mls_own_error(tmp_path):
    """The runner loads a package here too; it refuses a shape the fixed-shape package was not
    built for by name, and off macOS the prediction fails with coremltools' reason."""
    from onnxplug.errors import EPFail, InvalidArgument
    from onnxplug_coreml.runner import Runner

    path = build_package(_partition(), Settings(), CompileCache(), str(tmp_path))
    runner = Runner(path, "CPU_ONLY")
    assert [(s.onnx_name, s.shape) for s in runner.inputs] == [("x", (2, 4))]
    with pytest.raises(
        InvalidArgument, match=r"CoreML input 'x': the package was built for shape \[2, 4\], got \[3, 4\]"
    ):
        runner.run(np.ones((3, 4), np.float32))
    with pytest.raises(EPFail, match="only supported on macOS"):
        runner.run(np.ones((2, 4), np.float32))


@MACOS_ONLY
def test_predict_on_macos_matches_the_cpu_provider(tmp_path):
    """Not exercised in CI (Linux): compile and predict one partition through coremltools."""
    from onnxplug_coreml.runner import Runner

    partition = _partition()
    path = build_package(partition, Settings(compute_units="CPU_ONLY"), CompileCache(), str(tmp_path))
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    (y,) = Runner(path, "CPU_ONLY").run(x)
    np.testing.assert_allclose(y, np.maximum(x @ np.ones((4, 3), np.float32), 0), rtol=1e-5)


@MACOS_ONLY
def test_session_on_macos_runs_bert_through_coreml():
    """Not exercised in CI (Linux): a session with the CoreML provider, against torch's output."""
    import onnxplug

    model, feeds, expected = _bert("dynamo")
    session = onnxplug.InferenceSession(
        model.SerializeToString(), providers=["CoreMLExecutionProvider", "CPUExecutionProvider"]
    )
    assert "CoreMLExecutionProvider" in session.get_providers()
    np.testing.assert_allclose(session.run(None, feeds)[0], expected, atol=1e-3)

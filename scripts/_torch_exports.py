"""What the test-model scripts (``make_transformer_models.py``, ``make_recurrent_models.py``) share:
one torch module exported by either exporter, next to its sample inputs and torch's outputs."""

from __future__ import annotations

import pathlib
import warnings

import numpy as np

__all__ = ["OPSET", "export_with_outputs"]

#: The TorchScript exporter writes opset 17 directly; the dynamo exporter writes 18 and its
#: down-conversion to 17 keeps Split's opset-18 num_outputs attribute (an invalid model), so it
#: stays at 18.
OPSET = {"torchscript": 17, "dynamo": 18}


def export_with_outputs(module, inputs: dict, output_names: list[str], path: pathlib.Path, exporter: str, **options):
    """Export ``module`` (eval mode) for ``inputs`` (numpy arrays by ONNX input name) to ``path``
    with ``exporter`` (``torchscript``: ``torch.onnx.export(dynamo=False)``, ``options`` such as
    ``dynamic_axes`` passed on; ``dynamo``), and write ``<path's model name>.npz`` beside it: the
    inputs under their names and torch's outputs as ``out:<output name>``.  Returns ``path``."""
    import torch

    args = tuple(torch.from_numpy(v) for v in inputs.values())
    with torch.no_grad():
        expected = module(*args)
    if isinstance(expected, torch.Tensor):
        expected = (expected,)
    kwargs = dict(input_names=list(inputs), output_names=output_names, opset_version=OPSET[exporter])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            torch.onnx.export(module, args, str(path), dynamo=False, **options, **kwargs)
        else:
            torch.onnx.export(module, args, str(path), dynamo=True, external_data=False, **kwargs)
    arrays = dict(inputs)
    arrays.update({f"out:{n}": t.numpy() for n, t in zip(output_names, expected, strict=True)})
    np.savez(path.with_name(path.name.split(".")[0] + ".npz"), **arrays)
    return path

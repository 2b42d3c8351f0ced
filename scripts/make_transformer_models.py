"""Export small transformer test models with torch (BERT, GPT-2 with and without past, ViT).

The attention fusion rules (``onnxplug_ms_ops.rules.attention``) must match what torch's
exporters really write, so the tests run on real exports rather than hand-built graphs.  Every
model is randomly initialised from a small transformers config (no hub download), in eval mode,
with a fixed seed, and written to ``tests/data/transformers/`` as ``<name>.<exporter>.onnx``
next to ``<name>.npz`` (the sample inputs under their ONNX input names, and torch's outputs as
``out:<onnx output name>``).

Usage (from the repository root, with the test venv)::

    python scripts/make_transformer_models.py              # every model, both exporters
    python scripts/make_transformer_models.py --only bert  # one model
    python scripts/make_transformer_models.py --exporters torchscript

``torchscript`` is ``torch.onnx.export(dynamo=False)``, what most deployed models were exported
with; ``dynamo`` is ``dynamo=True``.  An exporter that fails on a model is reported and skipped
(the printed reason says why); the files of the ones that work are still written.

Attention runs in transformers' ``eager`` implementation: with ``sdpa`` the TorchScript exporter
writes the same MatMul/Softmax/MatMul chain but with the scale split over Q and K, which the rules
also handle, so both are exported for BERT (``bert_sdpa``).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np
from _torch_exports import export_with_outputs

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "transformers"
SEED = 0


def _bert(attn="eager"):
    from transformers import BertConfig, BertModel

    config = BertConfig(
        vocab_size=100,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=32,
        attn_implementation=attn,
    )
    model = BertModel(config, add_pooling_layer=False)
    rng = np.random.default_rng(SEED)
    ids = rng.integers(0, 100, size=(2, 8), dtype=np.int64)
    mask = np.ones((2, 8), dtype=np.int64)
    mask[1, 5:] = 0
    inputs = {"input_ids": ids, "attention_mask": mask}

    class Wrap(_Module):
        def forward(self, input_ids, attention_mask):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    dynamic = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    return Wrap(model), inputs, ["last_hidden_state"], dynamic


def _gpt2_config():
    from transformers import GPT2Config

    return GPT2Config(
        vocab_size=100, n_positions=32, n_embd=64, n_layer=2, n_head=4, n_inner=128, attn_implementation="eager"
    )


def _gpt2():
    from transformers import GPT2Model

    model = GPT2Model(_gpt2_config())
    ids = np.random.default_rng(SEED).integers(0, 100, size=(2, 8), dtype=np.int64)
    mask = np.ones((2, 8), dtype=np.int64)
    mask[1, :2] = 0  # left padding, as batched generation pads

    # Without an attention_mask transformers looks for packed sequences in the position ids
    # (torch.diff), which the TorchScript exporter cannot export; deployed GPT-2 exports take
    # the mask as an input anyway.
    class Wrap(_Module):
        def forward(self, input_ids, attention_mask):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state

    dynamic = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    return Wrap(model), {"input_ids": ids, "attention_mask": mask}, ["last_hidden_state"], dynamic


def _gpt2_past():
    import torch
    from transformers import DynamicCache, GPT2Model

    config = _gpt2_config()
    model = GPT2Model(config)
    layers, heads, head_size = config.n_layer, config.n_head, config.n_embd // config.n_head
    rng = np.random.default_rng(SEED)
    inputs = {"input_ids": rng.integers(0, 100, size=(2, 3), dtype=np.int64)}
    for i in range(layers):
        inputs[f"past_key_{i}"] = rng.standard_normal((2, heads, 5, head_size)).astype(np.float32)
        inputs[f"past_value_{i}"] = rng.standard_normal((2, heads, 5, head_size)).astype(np.float32)

    class Wrap(_Module):
        def forward(self, input_ids, *past):
            cache = DynamicCache()
            for i in range(layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.inner(input_ids=input_ids, past_key_values=cache, use_cache=True)
            present = out.past_key_values
            flat = []
            for i in range(layers):
                layer = present.layers[i]
                flat += [layer.keys, layer.values]
            return (out.last_hidden_state, *flat)

    names = ["last_hidden_state"] + [f"present_{kind}_{i}" for i in range(layers) for kind in ("key", "value")]
    dynamic = {"input_ids": {0: "batch", 1: "seq"}}
    for i in range(layers):
        dynamic[f"past_key_{i}"] = {0: "batch", 2: "past"}
        dynamic[f"past_value_{i}"] = {0: "batch", 2: "past"}
    del torch
    return Wrap(model), inputs, names, dynamic


def _vit():
    from transformers import ViTConfig, ViTModel

    config = ViTConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        image_size=32,
        patch_size=8,
        num_channels=3,
        attn_implementation="eager",
    )
    model = ViTModel(config, add_pooling_layer=False)
    pixels = np.random.default_rng(SEED).standard_normal((2, 3, 32, 32)).astype(np.float32)

    class Wrap(_Module):
        def forward(self, pixel_values):
            return self.inner(pixel_values=pixel_values).last_hidden_state

    return Wrap(model), {"pixel_values": pixels}, ["last_hidden_state"], {"pixel_values": {0: "batch"}}


MODELS = {
    "bert": _bert,
    "bert_sdpa": lambda: _bert("sdpa"),
    "gpt2": _gpt2,
    "gpt2_past": _gpt2_past,
    "vit": _vit,
}


class _Module:  # replaced by a torch.nn.Module subclass in main() (torch is imported lazily)
    pass


def _export(name, exporter):
    import torch

    torch.manual_seed(SEED)
    module, inputs, output_names, dynamic = MODELS[name]()
    module.eval()
    path = OUT / f"{name}.{exporter}.onnx"
    return export_with_outputs(module, inputs, output_names, path, exporter, dynamic_axes=dynamic)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(MODELS), action="append")
    parser.add_argument("--exporters", nargs="+", default=["torchscript", "dynamo"], choices=["torchscript", "dynamo"])
    args = parser.parse_args(argv)
    import torch

    class Module(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

    globals()["_Module"] = Module
    OUT.mkdir(parents=True, exist_ok=True)
    failures = 0
    for name in args.only or MODELS:
        for exporter in args.exporters:
            try:
                path = _export(name, exporter)
            except Exception as exc:  # noqa: BLE001 - reported, the other exports go on
                failures += 1
                print(f"{name} [{exporter}]: FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
                continue
            print(f"{name} [{exporter}]: {path.relative_to(OUT.parent.parent.parent)} ({path.stat().st_size} bytes)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

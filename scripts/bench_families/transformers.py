"""Transformers at their published sizes, randomly initialised (no hub download), exported by torch.

- ``bert-base`` (12 layers, hidden 768, 12 heads, FFN 3072) at batch 1, sequence 128,
- ``minilm`` (MiniLM-L6-H384: 6 layers, hidden 384, 12 heads, FFN 1536), batch 1, sequence 128,
- ``gpt2-small`` (12 layers, hidden 768, 12 heads), batch 1, sequence 128, no past,
- ``vit-base`` (ViT-B/16 at 224×224: 12 layers, hidden 768, 197 tokens),

each in eval mode with eager attention, exported with ``torch.onnx.export(dynamo=False)`` at
opset 17 (what most deployed models were exported with; see scripts/make_transformer_models.py
for why eager).  The bytes are cached under ``~/.cache/onnxplug-bench/`` keyed by this file's
source.  Weights are random (seed 0), so outputs are compared between runtimes, not to labels.
"""

from __future__ import annotations

import hashlib
import io
import pathlib
import warnings

import numpy as np

from . import CACHE, BenchModel

SEQ = 128


def _bert(hidden: int, layers: int, heads: int, ffn: int):
    from transformers import BertConfig, BertModel

    config = BertConfig(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=ffn,
        attn_implementation="eager",
    )
    model = BertModel(config, add_pooling_layer=False)
    rng = np.random.default_rng(0)
    feeds = {
        "input_ids": rng.integers(0, config.vocab_size, size=(1, SEQ), dtype=np.int64),
        "attention_mask": np.ones((1, SEQ), dtype=np.int64),
    }
    return model, feeds, lambda m, ids, mask: m(input_ids=ids, attention_mask=mask).last_hidden_state


def _gpt2():
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config(attn_implementation="eager")
    model = GPT2Model(config)
    rng = np.random.default_rng(0)
    feeds = {
        "input_ids": rng.integers(0, config.vocab_size, size=(1, SEQ), dtype=np.int64),
        "attention_mask": np.ones((1, SEQ), dtype=np.int64),
    }
    return model, feeds, lambda m, ids, mask: m(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state


def _vit():
    from transformers import ViTConfig, ViTModel

    model = ViTModel(ViTConfig(attn_implementation="eager"), add_pooling_layer=False)
    rng = np.random.default_rng(0)
    feeds = {"pixel_values": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
    return model, feeds, lambda m, pixels: m(pixel_values=pixels).last_hidden_state


_BUILDERS = {
    "bert-base": lambda: _bert(768, 12, 12, 3072),
    "minilm": lambda: _bert(384, 6, 12, 1536),
    "gpt2-small": _gpt2,
    "vit-base": _vit,
}


def _export(name: str) -> tuple[bytes, dict[str, np.ndarray]]:
    import torch

    torch.manual_seed(0)
    model, feeds, call = _BUILDERS[name]()
    model.eval()

    class Wrapper(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args):
            return call(self.inner, *args)

    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.no_grad():
            torch.onnx.export(
                Wrapper(model),
                tuple(torch.from_numpy(v) for v in feeds.values()),
                buffer,
                dynamo=False,
                opset_version=17,
                input_names=list(feeds),
                output_names=["last_hidden_state"],
            )
    return buffer.getvalue(), feeds


def _cached(name: str):
    def build() -> tuple[bytes, dict[str, np.ndarray]]:
        key = hashlib.sha256(pathlib.Path(__file__).read_bytes()).hexdigest()[:12]
        path = CACHE / f"xfmr-{name}-{key}.onnx"
        feeds_path = path.with_suffix(".npz")
        if path.exists() and feeds_path.exists():
            with np.load(feeds_path) as stored:
                return path.read_bytes(), dict(stored)
        data, feeds = _export(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        np.savez(feeds_path, **feeds)
        return data, feeds

    return build


MODELS = [BenchModel(name, _cached(name)) for name in _BUILDERS]

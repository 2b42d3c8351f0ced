"""Export the small torch modules that tests/optimizer/test_exported_models.py fuses.

Each module is one pattern as real models write it (LLaMA's RMSNorm, GPT-2's NewGELU, a BERT-like
residual + LayerNorm + Linear + GELU block, ...).  Both of torch's exporters are used: the dynamo
exporter (initializers, opset 18) and the TorchScript one (``Constant`` nodes).

    python scripts/make_fusion_models.py            # writes tests/data/fusions/*.onnx
"""

from __future__ import annotations

import math
import pathlib

import torch

OUT = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "fusions"


class RMSNorm(torch.nn.Module):
    """transformers' LlamaRMSNorm."""

    def __init__(self, hidden=8, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(hidden) + 0.5)
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        h = x.to(torch.float32)
        variance = h.pow(2).mean(-1, keepdim=True)
        return self.weight * (h * torch.rsqrt(variance + self.eps)).to(dtype)


class ResidualRMSNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = RMSNorm()

    def forward(self, x, residual):
        return self.norm(x + residual)


class NewGELU(torch.nn.Module):
    """transformers' NewGELUActivation (GPT-2)."""

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2MLP(torch.nn.Module):
    """GPT-2's MLP: Linear, NewGELU, Linear (3-D input: the Linears export as MatMul + Add)."""

    def __init__(self, hidden=8):
        super().__init__()
        self.fc = torch.nn.Linear(hidden, 2 * hidden)
        self.act = NewGELU()
        self.proj = torch.nn.Linear(2 * hidden, hidden)

    def forward(self, x):
        return self.proj(self.act(self.fc(x)))


class HandwrittenLayerNorm(torch.nn.Module):
    """A layer norm written out (ConvNeXt, older BERT ports)."""

    def __init__(self, hidden=8, eps=1e-5):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(hidden) + 0.5)
        self.bias = torch.nn.Parameter(torch.rand(hidden))
        self.eps = eps

    def forward(self, x):
        u = x.mean(-1, keepdim=True)
        s = (x - u).pow(2).mean(-1, keepdim=True)
        return self.weight * ((x - u) / torch.sqrt(s + self.eps)) + self.bias


class BertLikeBlock(torch.nn.Module):
    """Residual Add + LayerNorm, then Linear + GELU (exact)."""

    def __init__(self, hidden=8):
        super().__init__()
        self.norm = torch.nn.LayerNorm(hidden)
        self.fc = torch.nn.Linear(hidden, hidden)
        self.act = torch.nn.GELU()

    def forward(self, x, residual):
        return self.act(self.fc(self.norm(x + residual)))


class ConvBNReLU(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


class LinearReLU(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.fc(x))


class ScaledScores(torch.nn.Module):
    """Attention scores: ``q @ k^T / sqrt(d)``."""

    def forward(self, q, k):
        return q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])


def models():
    x = torch.randn(2, 5, 8)
    return {
        "rms_norm": (RMSNorm(), (x,)),
        "residual_rms_norm": (ResidualRMSNorm(), (x, x)),
        "new_gelu": (NewGELU(), (x,)),
        "gpt2_mlp": (GPT2MLP(), (x,)),
        "handwritten_layer_norm": (HandwrittenLayerNorm(), (x,)),
        "bert_like_block": (BertLikeBlock(), (x, x)),
        "conv_bn_relu": (ConvBNReLU(), (torch.randn(1, 3, 8, 8),)),
        "linear_relu": (LinearReLU(), (torch.randn(3, 8),)),
        "scaled_scores": (ScaledScores(), (torch.randn(2, 4, 5, 8), torch.randn(2, 4, 5, 8))),
    }


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    for name, (module, args) in models().items():
        for exporter, dynamo in (("dynamo", True), ("torchscript", False)):
            path = OUT / f"{name}.{exporter}.onnx"
            extra = {"external_data": False} if dynamo else {}
            torch.onnx.export(module.eval(), args, str(path), dynamo=dynamo, opset_version=18, **extra)
            print(path.relative_to(OUT.parents[2]))


if __name__ == "__main__":
    main()

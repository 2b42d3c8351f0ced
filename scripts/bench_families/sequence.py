"""Recurrent networks on their own: models whose first heavy node is an RNN layer, not a convolution.

Why a family of its own: in ``ocr_rec`` the LSTM runs after the convolutions, so the CPU
provider's thread team is already running when it starts; a model that *begins* with a
recurrent layer (speech features, sensor series, tagging) reaches it with nothing started, and
the order in which BLAS's threads and the team are used decides its speed (see
``docs/benchmarks.md``).  The models are defined here in torch (random weights, seed 0, eval
mode), exported with torch.onnx at opset 17 and cached like the cnn family's:

- ``lstm-tagger``: 80 features × 100 steps → two bidirectional LSTM layers of 128 → a Linear to
  40 classes per step and a LogSoftmax (an acoustic model's shape);
- ``gru-encoder``: 64 features × 60 steps → two GRU layers of 192 → the last step's Linear to
  10 classes (a series classifier);
- ``lstm-forecast``: 16 series × 48 steps, batch 8 → one LSTM layer of 64 → a Linear per step.
"""

from __future__ import annotations

import functools

from . import BenchModel, cached_torch_model, export_torch


def _torch_models():
    import torch
    from torch import nn

    class LstmTagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(80, 128, num_layers=2, bidirectional=True, batch_first=True)
            self.fc = nn.Linear(256, 40)

        def forward(self, x):
            out, _ = self.rnn(x)
            return torch.log_softmax(self.fc(out), -1)

    class GruEncoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.GRU(64, 192, num_layers=2, batch_first=True)
            self.fc = nn.Linear(192, 10)

        def forward(self, x):
            out, _ = self.rnn(x)
            return self.fc(out[:, -1])

    class LstmForecast(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(16, 64, batch_first=True)
            self.fc = nn.Linear(64, 16)

        def forward(self, x):
            out, _ = self.rnn(x)
            return self.fc(out)

    return {
        "lstm-tagger": (LstmTagger, (1, 100, 80)),
        "gru-encoder": (GruEncoder, (1, 60, 64)),
        "lstm-forecast": (LstmForecast, (8, 48, 16)),
    }


def _export(name: str) -> bytes:
    import torch

    cls, shape = _torch_models()[name]
    torch.manual_seed(0)
    return export_torch(cls().eval(), shape)


MODELS = [
    BenchModel(name, cached_torch_model("sequence", name, __file__, functools.partial(_export, name)))
    for name in ("lstm-tagger", "gru-encoder", "lstm-forecast")
]

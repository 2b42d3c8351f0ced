"""Export small recurrent test models with torch (LSTM and GRU layers as real exporters write them).

The CPU provider compiles float32 LSTM and GRU recurrences (``onnxplug_cpu.kernels._recurrent_jit``);
its tests check them against onnx's reference evaluator on hand-built nodes, and these files check
them on what torch.onnx really writes: weights as initializers in ONNX's gate order (torch's
``i, f, g, o`` reordered), initial states made by Shape/Expand chains or fed as inputs,
``linear_before_reset=1`` GRUs, stacked layers, batch-first models.  Each model is randomly
initialised (fixed seed), in eval mode, and written to ``tests/data/recurrent/`` as
``<name>.<exporter>.onnx`` next to ``<name>.npz`` (the sample inputs under their ONNX input
names, and torch's outputs as ``out:<onnx output name>``).  The sizes make the compiled product
take its partial column blocks and batches over one pass of four entries.

Usage (from the repository root, with torch installed)::

    python scripts/make_recurrent_models.py                 # every model, both exporters
    python scripts/make_recurrent_models.py --only gru_encoder
    python scripts/make_recurrent_models.py --exporters torchscript

``torchscript`` is ``torch.onnx.export(dynamo=False)``; ``dynamo`` is ``dynamo=True``.  An exporter
that fails on a model is reported and skipped (the printed reason says why).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np
from _torch_exports import export_with_outputs

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "recurrent"
SEED = 0


def _lstm_tagger(nn, torch):
    """Two bidirectional LSTM layers of 16 (batch first), a Linear per step and a LogSoftmax."""

    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(8, 16, num_layers=2, bidirectional=True, batch_first=True)
            self.fc = nn.Linear(32, 5)

        def forward(self, x):
            out, _ = self.rnn(x)
            return torch.log_softmax(self.fc(out), -1)

    x = np.random.default_rng(SEED).standard_normal((2, 7, 8)).astype(np.float32)
    return Tagger(), {"x": x}, ["y"]


def _gru_encoder(nn, torch):
    """Two GRU layers of 37 (batch first, batch 6: one full pass of the product and two entries),
    the last step's Linear."""

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.GRU(6, 37, num_layers=2, batch_first=True)
            self.fc = nn.Linear(37, 4)

        def forward(self, x):
            out, _ = self.rnn(x)
            return self.fc(out[:, -1])

    x = np.random.default_rng(SEED).standard_normal((6, 9, 6)).astype(np.float32)
    return Encoder(), {"x": x}, ["y"]


def _lstm_states(nn, torch):
    """One LSTM layer of 70 (280 gate columns: four blocks of 64 and 24) fed its initial states,
    returning the sequence and both final states (sequence first, batch 5)."""

    class Stateful(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(5, 70)

        def forward(self, x, h0, c0):
            out, (h, c) = self.rnn(x, (h0, c0))
            return out, h, c

    rng = np.random.default_rng(SEED)
    inputs = {
        "x": rng.standard_normal((11, 5, 5)).astype(np.float32),
        "h0": rng.standard_normal((1, 5, 70)).astype(np.float32) * 0.5,
        "c0": rng.standard_normal((1, 5, 70)).astype(np.float32) * 0.5,
    }
    return Stateful(), inputs, ["y", "h", "c"]


def _gru_bidirectional(nn, torch):
    """A bidirectional GRU of 20 fed its initial state, both directions' outputs concatenated."""

    class Bidirectional(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.GRU(4, 20, bidirectional=True)

        def forward(self, x, h0):
            out, h = self.rnn(x, h0)
            return out, h

    rng = np.random.default_rng(SEED)
    inputs = {
        "x": rng.standard_normal((8, 3, 4)).astype(np.float32),
        "h0": rng.standard_normal((2, 3, 20)).astype(np.float32) * 0.5,
    }
    return Bidirectional(), inputs, ["y", "h"]


MODELS = {
    "lstm_tagger": _lstm_tagger,
    "gru_encoder": _gru_encoder,
    "lstm_states": _lstm_states,
    "gru_bidirectional": _gru_bidirectional,
}


def _export(name, exporter):
    import torch
    from torch import nn

    torch.manual_seed(SEED)
    module, inputs, output_names = MODELS[name](nn, torch)
    module.eval()
    return export_with_outputs(module, inputs, output_names, OUT / f"{name}.{exporter}.onnx", exporter)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(MODELS), action="append")
    parser.add_argument("--exporters", nargs="+", default=["torchscript", "dynamo"], choices=["torchscript", "dynamo"])
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in args.only or sorted(MODELS):
        for exporter in args.exporters:
            try:
                path = _export(name, exporter)
            except Exception as error:  # noqa: BLE001 - reported, the other exports still run
                failed += 1
                print(f"{name} ({exporter}): not exported: {type(error).__name__}: {error}".splitlines()[0])
                continue
            print(f"{name} ({exporter}): {path.relative_to(OUT.parent.parent.parent)} ({path.stat().st_size} bytes)")
    return 1 if failed and failed == len(args.only or MODELS) * len(args.exporters) else 0


if __name__ == "__main__":
    sys.exit(main())

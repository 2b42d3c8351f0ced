"""Convolutional networks: the onnx wheel's light model-zoo classics and small torch-defined CNNs.

The light models (resnet50, densenet121, inception_v1/v2, vgg19, squeezenet, shufflenet v1) ship
inside the onnx wheel; their initializers are taken out of the graph inputs so that runtimes treat
them as constants, as exporters write weights today.  The other models are defined here in torch
(random weights, seed 0, eval mode) and exported with torch.onnx at opset 17; their bytes are cached
under ``~/.cache/onnxplug-bench/`` (the key includes this module's source, so editing a model
rebuilds it):

- ``mobilenetv2`` (224×224, width 1.0; depthwise convolutions and Clip as ReLU6),
- ``shufflenetv2`` (224×224, x1.0; grouped/depthwise convolutions, channel shuffle, Split),
- ``unet`` (a small 4-level UNet at 128×128 with ConvTranspose and bilinear Resize on the way up),
- ``yolo`` (a YOLO-style detector at 320×320: Conv+SiLU, CSP blocks, nearest Resize, Concat,
  Sigmoid heads at three scales),
- ``ocr_det`` (DB-style text detection at 320×320: conv backbone, FPN with nearest upsampling,
  ConvTranspose head, Sigmoid),
- ``ocr_rec`` (CRNN text recognition at 32×160: conv stack, bidirectional LSTM, per-step classes).
"""

from __future__ import annotations

import functools
import os

import numpy as np
import onnx

from . import BenchModel, cached_torch_model, export_torch, random_feeds

LIGHT = ("resnet50", "densenet121", "inception_v1", "inception_v2", "vgg19", "squeezenet", "shufflenet")


def _light(name: str):
    def build() -> tuple[bytes, dict[str, np.ndarray]]:
        from onnx.backend.test import loader

        model = onnx.load(os.path.join(loader.DATA_DIR, "light", f"light_{name}.onnx"))
        initializers = {t.name for t in model.graph.initializer}
        inputs = [i for i in model.graph.input if i.name not in initializers]
        del model.graph.input[:]
        model.graph.input.extend(inputs)
        model.ir_version = max(model.ir_version, 4)
        return model.SerializeToString(), random_feeds(model)

    return build


# -- torch models ----------------------------------------------------------------------------------


def _torch_models():
    """The torch module classes, defined on first use so that importing this family needs no torch."""
    import torch
    from torch import nn

    def cbr(cin, cout, k=3, s=1, groups=1, act=nn.ReLU):
        layers = [nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        if act is not None:
            layers.append(act())
        return nn.Sequential(*layers)

    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, stride, expand):
            super().__init__()
            hidden = cin * expand
            layers = [] if expand == 1 else [cbr(cin, hidden, 1, act=nn.ReLU6)]
            layers += [cbr(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6), cbr(hidden, cout, 1, act=None)]
            self.body = nn.Sequential(*layers)
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            return x + self.body(x) if self.residual else self.body(x)

    class MobileNetV2(nn.Module):
        def __init__(self):
            super().__init__()
            config = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2)]
            config.append((6, 320, 1, 1))
            layers, cin = [cbr(3, 32, 3, 2, act=nn.ReLU6)], 32
            for t, c, n, s in config:
                for i in range(n):
                    layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                    cin = c
            layers.append(cbr(cin, 1280, 1, act=nn.ReLU6))
            self.features = nn.Sequential(*layers)
            self.classifier = nn.Linear(1280, 1000)

        def forward(self, x):
            return self.classifier(self.features(x).mean((2, 3)))

    def shuffle(x, groups=2):
        n, c, h, w = x.shape
        return x.reshape(n, groups, c // groups, h, w).transpose(1, 2).reshape(n, c, h, w)

    class ShuffleUnit(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.stride = stride
            branch = cout // 2
            if stride == 2:
                self.left = nn.Sequential(cbr(cin, cin, 3, 2, groups=cin, act=None), cbr(cin, branch, 1))
            source = cin if stride == 2 else branch
            self.right = nn.Sequential(
                cbr(source, branch, 1), cbr(branch, branch, 3, stride, groups=branch, act=None), cbr(branch, branch, 1)
            )

        def forward(self, x):
            if self.stride == 1:
                a, b = x.chunk(2, dim=1)
                out = torch.cat((a, self.right(b)), 1)
            else:
                out = torch.cat((self.left(x), self.right(x)), 1)
            return shuffle(out)

    class ShuffleNetV2(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(cbr(3, 24, 3, 2), nn.MaxPool2d(3, 2, 1))
            layers, cin = [], 24
            for repeats, cout in ((4, 116), (8, 232), (4, 464)):
                for i in range(repeats):
                    layers.append(ShuffleUnit(cin, cout, 2 if i == 0 else 1))
                    cin = cout
            self.stages = nn.Sequential(*layers)
            self.last = cbr(cin, 1024, 1)
            self.fc = nn.Linear(1024, 1000)

        def forward(self, x):
            return self.fc(self.last(self.stages(self.stem(x))).mean((2, 3)))

    def double(cin, cout):
        return nn.Sequential(cbr(cin, cout), cbr(cout, cout))

    class UNet(nn.Module):
        def __init__(self, base=16):
            super().__init__()
            widths = [base, base * 2, base * 4, base * 8]
            self.down = nn.ModuleList([double(3, widths[0])])
            self.down.extend(double(widths[i], widths[i + 1]) for i in range(3))
            self.pool = nn.MaxPool2d(2)
            self.bottom = double(widths[3], widths[3] * 2)
            self.up_t = nn.ModuleList(
                [nn.ConvTranspose2d(widths[3] * 2, widths[3], 2, 2), nn.ConvTranspose2d(widths[3], widths[2], 2, 2)]
            )
            self.up_r = nn.ModuleList([cbr(widths[2], widths[1], 1), cbr(widths[1], widths[0], 1)])
            self.merge = nn.ModuleList([double(widths[3] * 2, widths[3]), double(widths[2] * 2, widths[2])])
            self.merge.extend([double(widths[1] * 2, widths[1]), double(widths[0] * 2, widths[0])])
            self.head = nn.Conv2d(widths[0], 2, 1)

        def forward(self, x):
            skips = []
            for block in self.down:
                x = block(x)
                skips.append(x)
                x = self.pool(x)
            x = self.bottom(x)
            for i, up in enumerate(self.up_t):
                x = self.merge[i](torch.cat((up(x), skips[3 - i]), 1))
            for i, reduce in enumerate(self.up_r):
                x = nn.functional.interpolate(reduce(x), scale_factor=2.0, mode="bilinear", align_corners=False)
                x = self.merge[2 + i](torch.cat((x, skips[1 - i]), 1))
            return self.head(x)

    def cs(cin, cout, k=1, s=1):
        return cbr(cin, cout, k, s, act=nn.SiLU)

    class CSP(nn.Module):
        def __init__(self, cin, cout, n=1, shortcut=True):
            super().__init__()
            half = cout // 2
            self.a, self.b, self.out = cs(cin, half), cs(cin, half), cs(2 * half, cout)
            self.blocks = nn.ModuleList(nn.Sequential(cs(half, half), cs(half, half, 3)) for _ in range(n))
            self.shortcut = shortcut

        def forward(self, x):
            a = self.a(x)
            for block in self.blocks:
                a = a + block(a) if self.shortcut else block(a)
            return self.out(torch.cat((a, self.b(x)), 1))

    class Yolo(nn.Module):
        def __init__(self, w=16, classes=80):
            super().__init__()
            self.stem = cs(3, w, 3, 2)
            self.c2 = nn.Sequential(cs(w, 2 * w, 3, 2), CSP(2 * w, 2 * w))
            self.c3 = nn.Sequential(cs(2 * w, 4 * w, 3, 2), CSP(4 * w, 4 * w, 2))
            self.c4 = nn.Sequential(cs(4 * w, 8 * w, 3, 2), CSP(8 * w, 8 * w, 2))
            self.c5 = nn.Sequential(cs(8 * w, 16 * w, 3, 2), CSP(16 * w, 16 * w))
            self.lat5, self.p4 = cs(16 * w, 8 * w), CSP(16 * w, 8 * w, shortcut=False)
            self.lat4, self.p3 = cs(8 * w, 4 * w), CSP(8 * w, 4 * w, shortcut=False)
            self.heads = nn.ModuleList(nn.Conv2d(c, 3 * (5 + classes), 1) for c in (4 * w, 8 * w, 16 * w))

        def forward(self, x):
            c3 = self.c3(self.c2(self.stem(x)))
            c4 = self.c4(c3)
            c5 = self.c5(c4)
            up = nn.functional.interpolate(self.lat5(c5), scale_factor=2.0, mode="nearest")
            p4 = self.p4(torch.cat((up, c4), 1))
            up = nn.functional.interpolate(self.lat4(p4), scale_factor=2.0, mode="nearest")
            p3 = self.p3(torch.cat((up, c3), 1))
            return tuple(torch.sigmoid(h(p)) for h, p in zip(self.heads, (p3, p4, c5)))

    class Basic(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.body = nn.Sequential(cbr(cin, cout, 3, stride), cbr(cout, cout, 3, act=None))
            self.skip = None if stride == 1 and cin == cout else cbr(cin, cout, 1, stride, act=None)

        def forward(self, x):
            return torch.relu(self.body(x) + (x if self.skip is None else self.skip(x)))

    class OcrDet(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(cbr(3, 32, 3, 2), nn.MaxPool2d(3, 2, 1))
            widths, self.stages, cin = (32, 64, 128, 256), nn.ModuleList(), 32
            for i, c in enumerate(widths):
                self.stages.append(nn.Sequential(Basic(cin, c, 1 if i == 0 else 2), Basic(c, c, 1)))
                cin = c
            self.lateral = nn.ModuleList(nn.Conv2d(c, 64, 1, bias=False) for c in widths)
            self.smooth = nn.ModuleList(nn.Conv2d(64, 16, 3, padding=1, bias=False) for _ in widths)
            self.head = nn.Sequential(
                cbr(64, 16),
                nn.ConvTranspose2d(16, 16, 2, 2),
                nn.BatchNorm2d(16),
                nn.ReLU(),
                nn.ConvTranspose2d(16, 1, 2, 2),
                nn.Sigmoid(),
            )

        def forward(self, x):
            x = self.stem(x)
            features = []
            for stage in self.stages:
                x = stage(x)
                features.append(x)
            lat = [lateral(f) for lateral, f in zip(self.lateral, features)]
            for i in range(3, 0, -1):
                lat[i - 1] = lat[i - 1] + nn.functional.interpolate(lat[i], scale_factor=2.0, mode="nearest")
            maps = [
                nn.functional.interpolate(smooth(p), scale_factor=float(2**i), mode="nearest") if i else smooth(p)
                for i, (smooth, p) in enumerate(zip(self.smooth, lat))
            ]
            return self.head(torch.cat(maps, 1))

    class OcrRec(nn.Module):
        def __init__(self, classes=97, hidden=96):
            super().__init__()
            self.convs = nn.Sequential(
                cbr(3, 32),
                nn.MaxPool2d(2, 2),
                cbr(32, 64),
                nn.MaxPool2d(2, 2),
                cbr(64, 128),
                cbr(128, 128),
                nn.MaxPool2d((2, 1), (2, 1)),
                cbr(128, 256),
                cbr(256, 256),
                nn.MaxPool2d((2, 1), (2, 1)),
                cbr(256, 256, 2, 1),
            )
            self.rnn = nn.LSTM(256, hidden, bidirectional=True, batch_first=True)
            self.fc = nn.Linear(2 * hidden, classes)

        def forward(self, x):
            features = self.convs(x)  # (N, 256, 1, W')
            sequence = features.mean(2).permute(0, 2, 1)  # (N, W', 256)
            out, _ = self.rnn(sequence)
            return self.fc(out).softmax(-1)

    return {
        "mobilenetv2": (MobileNetV2, (1, 3, 224, 224)),
        "shufflenetv2": (ShuffleNetV2, (1, 3, 224, 224)),
        "unet": (UNet, (1, 3, 128, 128)),
        "yolo": (Yolo, (1, 3, 320, 320)),
        "ocr_det": (OcrDet, (1, 3, 320, 320)),
        "ocr_rec": (OcrRec, (1, 3, 32, 160)),
    }


def _export(name: str) -> bytes:
    import torch

    cls, shape = _torch_models()[name]
    torch.manual_seed(0)
    module = cls().eval()
    for m in module.modules():  # non-trivial statistics, so BatchNormalization folding is exercised
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    return export_torch(module, shape)


TORCH = ("mobilenetv2", "shufflenetv2", "unet", "yolo", "ocr_det", "ocr_rec")
MODELS = [BenchModel(name, _light(name)) for name in LIGHT] + [
    BenchModel(name, cached_torch_model("cnn", name, __file__, functools.partial(_export, name))) for name in TORCH
]

"""The PyTorch modules make_reference.py exports: torchvision-style architectures at small width.

There is no CPU torchvision build here, so ResNet's BasicBlock and MobileNetV2's inverted residual are
written out with the same layer order torchvision uses (conv -> BN -> activation, residual added before
the last ReLU in BasicBlock, linear bottleneck in MobileNetV2), just with few channels.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class BasicBlock(nn.Module):
    """ResNet-18/34's block: two 3x3 conv+BN, identity or 1x1-conv+BN shortcut, ReLU after the sum."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + identity)


class ResNet(nn.Module):
    """ResNet stem (7x7/2 conv, BN, ReLU, 3x3/2 max pool), two stages of BasicBlocks, global pool, fc."""

    def __init__(self, width: int = 8, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = nn.Sequential(BasicBlock(width, width, 1))
        self.layer2 = nn.Sequential(BasicBlock(width, 2 * width, 2), BasicBlock(2 * width, 2 * width, 1))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layer2(self.layer1(x))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def conv_bn_relu6(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU6())


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expand (ReLU6), 3x3 depthwise (ReLU6), 1x1 linear projection, residual
    when the shape allows."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        layers = [conv_bn_relu6(cin, hidden, 1)] if expand != 1 else []
        layers += [conv_bn_relu6(hidden, hidden, 3, stride, groups=hidden),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)
        self.use_residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.conv(x) if self.use_residual else self.conv(x)


class MobileNetV2(nn.Module):
    """MobileNetV2's layout at small width: stem, three inverted residuals, 1x1 head, pool, classifier."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn_relu6(3, 8, 3, 2),
            InvertedResidual(8, 8, 1, 1),
            InvertedResidual(8, 12, 2, 4),
            InvertedResidual(12, 12, 1, 4),
            conv_bn_relu6(12, 32, 1))
        self.classifier = nn.Linear(32, classes)

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


class Encoder(nn.Module):
    """nn.TransformerEncoderLayer (batch_first, post-norm, ReLU feed-forward) as the whole model."""

    def __init__(self, d_model: int = 16, heads: int = 4):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=32, batch_first=True)

    def forward(self, x):
        return self.layer(x)


class StackedLSTM(nn.Module):
    """Two-layer nn.LSTM with initial states as inputs; returns the sequence and both final states."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 6, num_layers=2, batch_first=True)

    def forward(self, x, h0, c0):
        y, (hn, cn) = self.lstm(x, (h0, c0))
        return y, hn, cn


class BiGRU(nn.Module):
    """Bidirectional nn.GRU (ONNX GRU with linear_before_reset=1) with an initial state input."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(4, 6, batch_first=True, bidirectional=True)

    def forward(self, x, h0):
        y, hn = self.gru(x, h0)
        return y, hn


class LayerNormGeluMLP(nn.Module):
    """Linear -> LayerNorm -> GELU (erf) -> Linear -> LayerNorm -> GELU (tanh approximation) -> Linear."""

    def __init__(self):
        super().__init__()
        self.fc1, self.ln1 = nn.Linear(8, 16), nn.LayerNorm(16)
        self.fc2, self.ln2 = nn.Linear(16, 16), nn.LayerNorm(16)
        self.fc3 = nn.Linear(16, 4)

    def forward(self, x):
        x = F.gelu(self.ln1(self.fc1(x)))
        x = F.gelu(self.ln2(self.fc2(x)), approximate="tanh")
        return self.fc3(x)


class UpsampleBlock(nn.Module):
    """ConvTranspose2d -> BatchNorm2d -> ReLU, then bilinear upsampling two ways (half-pixel and
    align_corners), each followed by a 3x3 conv: two outputs, two Resize coordinate modes."""

    def __init__(self):
        super().__init__()
        self.deconv = nn.ConvTranspose2d(3, 6, 3, stride=2, padding=1, output_padding=1)
        self.bn = nn.BatchNorm2d(6)
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.head_a = nn.Conv2d(6, 2, 3, padding=1)
        self.head_b = nn.Conv2d(6, 2, 3, padding=1)

    def forward(self, x):
        y = F.relu(self.bn(self.deconv(x)))
        a = self.head_a(self.up(y))
        b = self.head_b(F.interpolate(y, scale_factor=2, mode="bilinear", align_corners=True))
        return a, b


class UNetBlock(nn.Module):
    """Two U-Net levels: conv+ReLU encoders with 2x2 max pools, a bottleneck, and a decoder that
    upsamples bilinearly twice, each time concatenating the skip connection: once with
    ``nn.Upsample(scale_factor=2)``, once to the skip's size (``F.interpolate(size=skip.shape[2:])``,
    as U-Nets write it so odd sizes work). Exporters compute the second Resize's sizes from Shape ops."""

    def __init__(self):
        super().__init__()
        self.enc1, self.enc2 = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 6, 3, padding=1)
        self.bottleneck = nn.Conv2d(6, 6, 3, padding=1)
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.dec2, self.dec1 = nn.Conv2d(12, 4, 3, padding=1), nn.Conv2d(8, 2, 3, padding=1)

    def forward(self, x):
        skip1 = F.relu(self.enc1(x))
        skip2 = F.relu(self.enc2(F.max_pool2d(skip1, 2)))
        low = F.relu(self.bottleneck(F.max_pool2d(skip2, 2)))
        d2 = F.relu(self.dec2(torch.cat([self.up(low), skip2], dim=1)))
        up1 = F.interpolate(d2, size=skip1.shape[2:], mode="bilinear", align_corners=False)
        return self.dec1(torch.cat([up1, skip1], dim=1))


class SmallCNN(nn.Module):
    """Conv -> ReLU -> MaxPool -> Flatten -> Linear; exported with a symbolic batch dimension."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4 * 3 * 3, 5)

    def forward(self, x):
        return self.fc(torch.flatten(F.max_pool2d(F.relu(self.conv(x)), 2), 1))


class WideMLP(nn.Module):
    """An MLP whose weight matrices are big enough for the exporter to put them in external data."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(16, 64), nn.Linear(64, 64), nn.Linear(64, 4)

    def forward(self, x):
        return self.fc3(torch.tanh(self.fc2(torch.tanh(self.fc1(x)))))


class TwoConds(nn.Module):
    """Two torch.cond calls (ONNX If); make_reference feeds an x whose sum is positive, so the first
    takes its then-branch and the second its else-branch."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c, self.d = (nn.Linear(4, 4) for _ in range(4))

    def forward(self, x):
        h = torch.cond(x.sum() > 0, lambda t: torch.tanh(self.a(t)), lambda t: torch.sigmoid(self.b(t)), (x,))
        return torch.cond(x.sum() < 0, lambda t: self.c(t) * t, lambda t: self.d(t) - t, (h,))


class RecurrentLoop(nn.Module):
    """A Python loop with two carried values; torch.jit.script turns it into ONNX Loop. The trip count
    comes from the batch size (3 for batch 2) because the TorchScript exporter unrolls a literal
    ``range(3)``."""

    def __init__(self):
        super().__init__()
        self.cell = nn.Linear(4, 4)

    def forward(self, x):
        h = x
        acc = torch.zeros_like(x)
        for _ in range(x.shape[0] + 1):
            h = torch.tanh(self.cell(h) + x)
            acc = acc + h * h
        return acc


class TrainingBatchNorm(nn.Module):
    """Conv -> BatchNorm2d -> ReLU -> Conv -> BatchNorm2d, run in training mode (batch statistics)."""

    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)
        self.conv2, self.bn2 = nn.Conv2d(4, 3, 1), nn.BatchNorm2d(3)

    def forward(self, x):
        return self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))

"""ResNet / ResNeXt pieces shared by the region detectors: frozen batch norm, bottleneck blocks, the stem and the
body of res2 up to res4 or res5.

Both published detectors use MSRA/Caffe-style ResNets with batch-norm statistics folded in at test time; they
differ only in the constants of :class:`~capeval.models.regions.configuration.ResNetConfig` (where the stride sits,
the number of groups of the 3x3 convolution, the max-pool padding, the batch-norm epsilon).
"""
from __future__ import annotations

from typing import List

import torch
from torch import nn
from torch.nn import functional as F

from capeval.models.regions.configuration import RESNET_BLOCKS, ResNetConfig


class FrozenBatchNorm2d(nn.Module):
    """Batch norm with fixed statistics and affine terms: ``(x - mean) / sqrt(var + eps) * weight + bias``."""

    def __init__(self, channels: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.register_buffer("weight", torch.ones(channels))
        self.register_buffer("bias", torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps)


class Bottleneck(nn.Module):
    """1x1 -> 3x3 (``groups`` groups: ResNeXt when > 1) -> 1x1 residual block, each conv without bias and followed
    by frozen batch norm; a 1x1 projection shortcut when the channel count changes."""

    def __init__(self, in_channels: int, bottleneck_channels: int, out_channels: int, *, stride: int, dilation: int,
                 groups: int, stride_in_1x1: bool, eps: float) -> None:
        super().__init__()
        stride_1x1, stride_3x3 = (stride, 1) if stride_in_1x1 else (1, stride)
        self.conv1 = nn.Conv2d(in_channels, bottleneck_channels, 1, stride=stride_1x1, bias=False)
        self.norm1 = FrozenBatchNorm2d(bottleneck_channels, eps)
        self.conv2 = nn.Conv2d(bottleneck_channels, bottleneck_channels, 3, stride=stride_3x3, padding=dilation,
                               dilation=dilation, groups=groups, bias=False)
        self.norm2 = FrozenBatchNorm2d(bottleneck_channels, eps)
        self.conv3 = nn.Conv2d(bottleneck_channels, out_channels, 1, bias=False)
        self.norm3 = FrozenBatchNorm2d(out_channels, eps)
        self.shortcut = None
        self.shortcut_norm = None
        if in_channels != out_channels:
            self.shortcut = nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False)
            self.shortcut_norm = FrozenBatchNorm2d(out_channels, eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.norm1(self.conv1(x)))
        out = F.relu(self.norm2(self.conv2(out)))
        out = self.norm3(self.conv3(out))
        shortcut = x if self.shortcut is None else self.shortcut_norm(self.shortcut(x))
        return F.relu(out + shortcut)


def resnet_stage(num_blocks: int, in_channels: int, bottleneck_channels: int, out_channels: int, *, stride: int,
                 dilation: int, config: ResNetConfig) -> nn.Sequential:
    """``num_blocks`` bottlenecks; only the first changes the channel count and strides."""
    blocks = []
    for index in range(num_blocks):
        blocks.append(Bottleneck(in_channels if index == 0 else out_channels, bottleneck_channels, out_channels,
                                 stride=stride if index == 0 else 1, dilation=dilation, groups=config.num_groups,
                                 stride_in_1x1=config.stride_in_1x1, eps=config.batch_norm_eps))
    return nn.Sequential(*blocks)


class Stem(nn.Module):
    """7x7/2 conv, frozen batch norm, ReLU, 3x3/2 max pool (Caffe's ceil-mode unpadded pool or padding 1)."""

    def __init__(self, config: ResNetConfig) -> None:
        super().__init__()
        self.caffe_maxpool = config.caffe_maxpool
        self.conv = nn.Conv2d(3, config.stem_out_channels, 7, stride=2, padding=3, bias=False)
        self.norm = FrozenBatchNorm2d(config.stem_out_channels, config.batch_norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.norm(self.conv(x)))
        if self.caffe_maxpool:
            return F.max_pool2d(x, kernel_size=3, stride=2, padding=0, ceil_mode=True)
        return F.max_pool2d(x, kernel_size=3, stride=2, padding=1)


class Backbone(nn.Module):
    """Stem and the first ``num_stages`` residual stages (res2, res3, ...; strides 4, 8, 16, 32), each stage
    doubling the channels of the one before; :meth:`forward` returns every stage's output."""

    def __init__(self, config: ResNetConfig, num_stages: int) -> None:
        super().__init__()
        self.stem = Stem(config)
        blocks = RESNET_BLOCKS[config.depth][:num_stages]
        in_channels, bottleneck, out_channels = config.stem_out_channels, config.bottleneck_channels, \
            config.res2_out_channels
        for stage, num_blocks in enumerate(blocks, start=2):
            self.add_module(f"res{stage}", resnet_stage(num_blocks, in_channels, bottleneck, out_channels,
                                                        stride=1 if stage == 2 else 2, dilation=1, config=config))
            in_channels, bottleneck, out_channels = out_channels, bottleneck * 2, out_channels * 2
        self.num_stages = len(blocks)

    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:
        outputs = []
        x = self.stem(x)
        for stage in range(2, 2 + self.num_stages):
            x = getattr(self, f"res{stage}")(x)
            outputs.append(x)
        return outputs

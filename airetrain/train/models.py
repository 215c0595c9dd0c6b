"""Built-in models in plain PyTorch (their table: airetrain.builtin_models), and user models by import path.

Every builder takes the dataset's `meta` (shape and classes, or vocab and seq_len) and the
`model:` config section. A model's `blocks` (a ModuleList) are what FSDP shards one by one;
a model without them (nn.Sequential) is sharded child by child.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..builtin_models import MODELS
from ..run_config import Model
from .user_code import import_callable


def small_cnn(meta: dict, cfg: Model) -> nn.Module:
    """Two convolutions and a classifier: >95% on 8x8 digits in seconds on a CPU."""
    channels, height, width_px = meta["shape"]
    w = cfg.width
    return nn.Sequential(
        nn.Conv2d(channels, w, 3, padding=1), nn.ReLU(),
        nn.Conv2d(w, 2 * w, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(2 * w * (height // 2) * (width_px // 2), 4 * w), nn.ReLU(),
        nn.Dropout(cfg.dropout),
        nn.Linear(4 * w, meta["classes"]),
    )


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip = nn.Sequential() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.skip(x))


class ResNet18(nn.Module):
    """ResNet-18 layout (2-2-2-2 basic blocks), with a 3x3 stem for small images."""

    def __init__(self, meta: dict, cfg: Model):
        super().__init__()
        w = cfg.width
        self.stem = nn.Sequential(nn.Conv2d(meta["shape"][0], w, 3, 1, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU())
        widths, blocks, cin = [w, 2 * w, 4 * w, 8 * w], [], w
        for i, cout in enumerate(widths):
            for j in range(2):
                blocks.append(BasicBlock(cin, cout, 2 if i > 0 and j == 0 else 1))
                cin = cout
        self.blocks = nn.ModuleList(blocks)
        self.head = nn.Linear(cin, meta["classes"])

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


class TransformerBlock(nn.Module):
    def __init__(self, width: int, heads: int, causal: bool):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, meta: dict, cfg: Model):
        super().__init__()
        channels, height, width_px = meta["shape"]
        p, w = cfg.patch_size, cfg.width
        self.patch = nn.Conv2d(channels, w, p, p)
        self.cls = nn.Parameter(torch.zeros(1, 1, w))
        self.pos = nn.Parameter(torch.randn(1, (height // p) * (width_px // p) + 1, w) * 0.02)
        self.blocks = nn.ModuleList(TransformerBlock(w, cfg.heads, causal=False) for _ in range(cfg.depth))
        self.norm = nn.LayerNorm(w)
        self.head = nn.Linear(w, meta["classes"])

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(len(x), -1, -1), x], 1) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x[:, 0]))


class GPT(nn.Module):
    """A GPT-style decoder: token + position embeddings, causal blocks, tied output head."""

    def __init__(self, meta: dict, cfg: Model):
        super().__init__()
        w = cfg.width
        self.tokens = nn.Embedding(meta["vocab"], w)
        self.pos = nn.Parameter(torch.randn(1, meta["seq_len"], w) * 0.02)
        self.blocks = nn.ModuleList(TransformerBlock(w, cfg.heads, causal=True) for _ in range(cfg.depth))
        self.norm = nn.LayerNorm(w)
        self.head = nn.Linear(w, meta["vocab"], bias=False)
        self.head.weight = self.tokens.weight

    def forward(self, idx):
        x = self.tokens(idx) + self.pos[:, : idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


class ConvBlock(nn.Sequential):
    """Two 3x3 convolutions (3x3x3 in 3D), each with GroupNorm (independent of the batch size) and ReLU."""
    def __init__(self, dims: int, cin: int, cout: int):
        conv = nn.Conv2d if dims == 2 else nn.Conv3d
        super().__init__(conv(cin, cout, 3, padding=1), nn.GroupNorm(min(8, cout), cout), nn.ReLU(inplace=True),
                         conv(cout, cout, 3, padding=1), nn.GroupNorm(min(8, cout), cout), nn.ReLU(inplace=True))


class UNet(nn.Module):
    """UNet for segmentation, 2D or 3D (model.dims): `levels` halvings, channels doubling from
    model.width; output N x classes x H x W (x D), one score per class and pixel (voxel)."""

    def __init__(self, meta: dict, cfg: Model):
        super().__init__()
        dims, levels, w = cfg.dims, cfg.levels, cfg.width
        channels = [w * 2 ** i for i in range(levels + 1)]
        self.pool = (nn.MaxPool2d if dims == 2 else nn.MaxPool3d)(2)
        self.down = nn.ModuleList(ConvBlock(dims, cin, cout)
                                  for cin, cout in zip([meta["shape"][0], *channels[:-2]], channels[:-1]))
        self.bottom = ConvBlock(dims, channels[-2], channels[-1])
        upconv = nn.ConvTranspose2d if dims == 2 else nn.ConvTranspose3d
        self.upsample = nn.ModuleList(upconv(c * 2, c, 2, stride=2) for c in reversed(channels[:-1]))
        self.up = nn.ModuleList(ConvBlock(dims, c * 2, c) for c in reversed(channels[:-1]))
        self.head = (nn.Conv2d if dims == 2 else nn.Conv3d)(channels[0], meta["classes"], 1)

    def forward(self, x):
        skips = []
        for block in self.down:
            x = block(x)
            skips.append(x)
            x = self.pool(x)
        x = self.bottom(x)
        for upsample, block, skip in zip(self.upsample, self.up, reversed(skips)):
            x = block(torch.cat([upsample(x), skip], dim=1))
        return self.head(x)


def builder(name: str):
    """The builder of a built-in model (airetrain.builtin_models names it)."""
    return globals()[MODELS[name].builder]


def build_model(cfg: Model | dict, meta: dict) -> nn.Module:
    """The run's model for the dataset's meta. A user's builder (model.name 'package.module:function')
    is called as function(meta, model_config), the model section as a plain dict. cfg: the model section,
    or a dict of some of its keys (the schema's defaults for the rest)."""
    cfg = cfg if isinstance(cfg, Model) else Model.with_defaults("model", cfg)
    model = import_callable(cfg.name)(meta, cfg.to_dict()) if ":" in cfg.name else builder(cfg.name)(meta, cfg)
    if not isinstance(model, nn.Module):
        raise TypeError(f"model {cfg.name!r} returned {type(model).__name__}, not a torch.nn.Module")
    return model

"""User code shaped the way researchers write it, for the tests: their own datasets (float targets
with a validation split of their own, dict samples, no test split), losses and models (no `.blocks`:
layers as attributes, a Sequential, a Hugging Face-style decoder with its layers one level down that
returns an object with .loss).
write_ownlab puts it in an importable package `ownlab` (module ownlab.lab)."""
from pathlib import Path

OWNLAB = '''
import dataclasses
import os
import threading
import time

import torch
from torch import nn
from torch.utils.data import Dataset


class Regression(Dataset):
    """y = x . w, a float target: cross-entropy does not apply. Three splits of their own, of three
    sizes: train (512), validation (96), test (160)."""
    SPLITS = {"train": (0, 512), "validation": (2, 96), "test": (1, 160)}

    def __init__(self, split):
        seed, size = self.SPLITS[split]
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(size, 8, generator=g)
        self.y = (self.x @ (torch.arange(8.0) / 8)).unsqueeze(1)
        self.meta = {"features": 8}

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def regression_data(split, root):
    return Regression(split)


def regressor(meta, cfg):
    return nn.Sequential(nn.Linear(meta["features"], 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))


def tunable(meta, cfg):
    """A regressor whose hidden width is the user's own hyperparameter: model.options.hidden."""
    hidden = cfg["options"]["hidden"]
    return nn.Sequential(nn.Linear(meta["features"], hidden), nn.ReLU(), nn.Linear(hidden, 1))


def mse(output, batch):
    return nn.functional.mse_loss(output.float(), batch[1])


class NextToken(Dataset):
    """Dict samples, as a tokenizer gives them; training split only."""
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 16, (512, 9), generator=g).sort(dim=1).values   # learnable: sorted
        self.meta = {"vocab": 16}

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i, :-1], "labels": self.ids[i, 1:]}


def token_data(split, root):
    return NextToken() if split == "train" else None


@dataclasses.dataclass
class CausalLMOutput:
    loss: torch.Tensor
    logits: torch.Tensor


class Layer(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))
        self.norm = nn.LayerNorm(width)

    def forward(self, h):
        return h + self.mlp(self.norm(h))


class TinyDecoder(nn.Module):
    """Shaped like a Hugging Face decoder: layers one level down, labels in, an object with .loss out."""
    def __init__(self, vocab, width=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.model = nn.Module()
        self.model.layers = nn.ModuleList(Layer(width) for _ in range(3))
        self.lm_head = nn.Linear(width, vocab)

    def forward(self, input_ids, labels=None):
        h = self.embed(input_ids)
        for layer in self.model.layers:
            h = layer(h)
        logits = self.lm_head(h)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
        return CausalLMOutput(loss=loss, logits=logits)


def decoder(meta, cfg):
    return TinyDecoder(meta["vocab"])


class LayersAsAttributes(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(64, 96), nn.Linear(96, 96), nn.Linear(96, 10)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x.flatten(1))))))


def attributes(meta, cfg):
    return LayersAsAttributes()


def sequential(meta, cfg):
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 96), nn.ReLU(), nn.Linear(96, 10))


def hangs_once(meta, cfg):
    """The built-in small_cnn, whose training forward blocks forever on rank 1 at forward pass
    $HANG_AT, once: it leaves $HANG_MARKER behind (its content: when it blocked), so the restarted
    group goes on; with $HANG_ALWAYS, at that pass of every start. Without $HANG_MARKER it is small_cnn."""
    from airetrain.train.models import build_model

    model = build_model({**cfg, "name": "small_cnn"}, meta)
    plain, passes = model.forward, [0]

    def forward(x):
        if model.training:
            passes[0] += 1
            marker = os.environ.get("HANG_MARKER")
            if (marker and os.environ["RANK"] == "1" and passes[0] == int(os.environ["HANG_AT"])
                    and (os.environ.get("HANG_ALWAYS") or not os.path.exists(marker))):
                with open(marker, "w") as f:
                    f.write(repr(time.time()))
                block_forever()
        return plain(x)

    model.forward = forward
    return model


def paced(meta, cfg):
    """The built-in small_cnn, with each training forward pass a second long while $HOLD exists."""
    from airetrain.train.models import build_model

    model = build_model({**cfg, "name": "small_cnn"}, meta)
    plain = model.forward

    def forward(x):
        if model.training and os.path.exists(os.environ.get("HOLD", "/nonexistent")):
            time.sleep(1)
        return plain(x)

    model.forward = forward
    return model


def slow_on(meta, cfg):
    """The built-in small_cnn, with each training forward pass $SLOW_S seconds slower on the node $SLOW_NODE
    names: a straggler there (its GPU throttled, say)."""
    import socket

    from airetrain.train.models import build_model

    model = build_model({**cfg, "name": "small_cnn"}, meta)
    plain = model.forward
    slow = socket.gethostname() == os.environ.get("SLOW_NODE")

    def forward(x):
        if model.training and slow:
            time.sleep(float(os.environ.get("SLOW_S", "1")))
        return plain(x)

    model.forward = forward
    return model


def block_forever():
    threading.Event().wait()


def rmsprop(model, cfg):
    """A user's own optimizer: its square averages are state that a resume must restore."""
    return torch.optim.RMSprop(model.parameters(), lr=cfg["lr"], alpha=0.9)


def halved(step, total_steps, cfg):
    """A user's own schedule: the full rate for the first half of the steps, half of it after."""
    return 1.0 if step < total_steps // 2 else 0.5
'''


def write_ownlab(code: Path) -> Path:
    """The package ownlab under code/; returns code/, for PYTHONPATH."""
    (code / "ownlab").mkdir(parents=True, exist_ok=True)
    (code / "ownlab" / "__init__.py").write_text("")
    (code / "ownlab" / "lab.py").write_text(OWNLAB)
    return code

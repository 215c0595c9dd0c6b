"""Segmentation pieces: the generated shapes dataset, the UNet in 2D and 3D, Dice loss and metric."""
import json

import numpy as np
import pytest
import torch

from airetrain.stage.prepare import prepare_shapes
from airetrain.train.datasets import NpyShards
from airetrain.train.models import build_model
from airetrain.train.objective import Objective, dice_cross_entropy, dice_per_sample

from conftest import run_config

UNET_RUN = run_config({"model": {"name": "unet"}})
UNET = Objective(UNET_RUN.train, UNET_RUN.model)


@pytest.mark.parametrize("dims, side", [(2, 32), (3, 16)])
def test_shapes_are_written_as_npy_shards_with_masks_and_read_back(tmp_path, dims, side):
    root = prepare_shapes(tmp_path / "shapes", dims=dims, train=40, test=8, shard_size=16)
    meta = json.loads((root / "meta.json").read_text())
    assert meta["classes"] == 3 and meta["shape"] == [1, *[side] * dims] and meta["splits"] == {"train": 40, "test": 8}
    x, y = NpyShards(root, "train")[39]
    assert x.shape == (1, *[side] * dims) and y.shape == (side,) * dims and y.dtype == torch.int64
    classes = np.bincount(np.load(root / "train" / "y-00000.npy").ravel(), minlength=3)
    assert all(classes > 0)   # background, discs and squares all present
    again = prepare_shapes(tmp_path / "again", dims=dims, train=40, test=8, shard_size=16)
    assert (root / "files.json").read_text() == (again / "files.json").read_text()   # deterministic


@pytest.mark.parametrize("dims, side", [(2, 32), (3, 16)])
def test_the_unet_scores_every_pixel_or_voxel(dims, side):
    model = build_model({"name": "unet", "width": 4, "levels": 2, "dims": dims}, {"shape": [1, *[side] * dims],
                                                                                  "classes": 3})
    assert model(torch.zeros(2, 1, *[side] * dims)).shape == (2, 3, *[side] * dims)


def test_dice_is_one_for_a_perfect_mask_and_the_loss_is_lowest_there():
    y = torch.zeros(2, 8, 8, dtype=torch.long)
    y[:, 2:5, 2:5] = 1
    y[1, 6:, 6:] = 2
    perfect = torch.nn.functional.one_hot(y, 3).movedim(-1, 1).float() * 20
    assert dice_per_sample(perfect, y).tolist() == [1.0, 1.0]
    wrong = perfect.roll(1, dims=1)
    assert dice_per_sample(wrong, y).max() < 0.2
    assert dice_cross_entropy(perfect, (None, y)) < 0.01 < dice_cross_entropy(wrong, (None, y))
    metrics = UNET.metrics(perfect, (None, y))
    assert metrics == {"accuracy": (128.0, 128.0), "dice": (2.0, 2.0)}
    assert UNET.user_loss is dice_cross_entropy   # the unet's default loss

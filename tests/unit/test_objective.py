"""train/batches.py and train/objective.py: batches of any structure, the loss a model returns,
cross-entropy over the right dimension, accuracy only where it means something."""
import dataclasses
from collections import namedtuple

import pytest
import torch
from torch import nn

from airetrain.train import batches
from airetrain.train.objective import Objective, class_dim, returned_loss

from conftest import run_config

RUN = run_config()
BUILT_IN = Objective(RUN.train, RUN.model)


@dataclasses.dataclass
class Pair:
    image: torch.Tensor
    mask: torch.Tensor


def test_batches_of_any_structure_are_walked_and_rebuilt():
    Named = namedtuple("Named", "x y")
    batch = {"a": (torch.ones(4, 2), [torch.zeros(4)]), "b": Pair(torch.ones(4, 3), torch.ones(4)),
             "c": Named(torch.ones(4), torch.ones(4)), "note": "kept"}
    empty = batches.first_rows(batch, 0)
    assert empty["a"][0].shape == (0, 2) and empty["b"].mask.shape == (0,) and isinstance(empty["c"], Named)
    assert empty["note"] == "kept" and batches.size(batch) == 4 and batches.size(empty) == 0
    moved = batches.to_device(batch, torch.device("meta"))
    assert moved["b"].image.device.type == "meta" and isinstance(moved["a"][1], list)


def test_the_target_of_a_pair_or_a_dict():
    y = torch.arange(3)
    assert batches.target((torch.ones(3), y)) is y
    assert batches.target({"input_ids": torch.ones(3), "labels": y}) is y
    assert batches.target({"input_ids": torch.ones(3)}) is None


@dataclasses.dataclass
class ModelOutput:
    loss: torch.Tensor
    logits: torch.Tensor


def test_a_loss_the_model_returns_is_the_loss():
    loss = torch.tensor(2.5)
    assert returned_loss(loss) is loss
    assert returned_loss({"loss": loss, "logits": torch.ones(2, 3)}) is loss
    assert returned_loss(ModelOutput(loss, torch.ones(2, 3))) is loss
    assert returned_loss(torch.ones(2, 3)) is None
    assert BUILT_IN.loss(ModelOutput(loss, torch.ones(2, 3)), {"labels": torch.zeros(2)}) is loss
    assert BUILT_IN.metrics(ModelOutput(loss, torch.ones(2, 3)), {"labels": torch.zeros(2)}) == {}


def test_classes_last_for_classification_and_sequences_second_for_segmentation():
    assert class_dim(torch.ones(8, 10), torch.zeros(8, dtype=torch.long)) == -1
    assert class_dim(torch.ones(8, 5, 100), torch.zeros(8, 5, dtype=torch.long)) == -1
    assert class_dim(torch.ones(8, 3, 16, 16), torch.zeros(8, 16, 16, dtype=torch.long)) == 1
    assert class_dim(torch.ones(8, 1), torch.zeros(8, 1)) is None   # a float target: regression


def test_segmentation_cross_entropy_and_pixel_accuracy():
    logits = torch.zeros(2, 3, 4, 4)
    logits[:, 2] = 5.0                       # predicts class 2 everywhere
    y = torch.full((2, 4, 4), 2, dtype=torch.long)
    y[0, 0, 0] = 0                           # one pixel of 32 wrong
    loss = BUILT_IN.loss(logits, (torch.ones(2, 1, 4, 4), y))
    assert loss.item() == pytest.approx(nn.functional.cross_entropy(logits, y).item())
    metrics = BUILT_IN.metrics(logits, (None, y))
    assert metrics["accuracy"] == (31.0, 32.0) and set(metrics) == {"accuracy", "dice"}


def test_a_float_target_without_a_loss_says_to_set_train_loss():
    with pytest.raises(ValueError, match=r"output 8x1 float32, target 8x1 float32.*set train.loss"):
        BUILT_IN.loss(torch.ones(8, 1), (torch.ones(8, 4), torch.ones(8, 1)))


def test_a_loss_that_is_not_a_scalar_is_refused_by_name(tmp_path, monkeypatch):
    (tmp_path / "badloss.py").write_text("def per_sample(output, batch):\n    return output.sum(1)\n")
    monkeypatch.syspath_prepend(tmp_path)
    objective = Objective(RUN.train.replace(loss="badloss:per_sample"), RUN.model)
    with pytest.raises(TypeError, match="the loss must be a scalar tensor, got 4 float32"):
        objective.loss(torch.ones(4, 2), (torch.ones(4, 2), torch.ones(4)))

"""train/optim.py: the learning-rate schedule."""
import math

import pytest
import torch

from airetrain.run_config import Optim
from airetrain.train.optim import lr_factor, make_optimizer, make_scheduler


def test_warm_up_is_linear_and_reaches_the_full_rate_at_its_last_step():
    assert [lr_factor(s, 4, 100, "constant") for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]


def test_cosine_falls_from_one_after_warm_up_through_a_half_at_mid_way_to_zero_at_the_end():
    warmup, total = 10, 110
    assert lr_factor(warmup, warmup, total, "cosine") == 1.0
    assert lr_factor(warmup + 50, warmup, total, "cosine") == pytest.approx(0.5)
    assert lr_factor(total, warmup, total, "cosine") == pytest.approx(0.0, abs=1e-12)
    assert lr_factor(total + 5, warmup, total, "cosine") == pytest.approx(0.0, abs=1e-12)   # never negative
    values = [lr_factor(s, warmup, total, "cosine") for s in range(warmup, total + 1)]
    assert all(a > b for a, b in zip(values, values[1:]))


def test_no_warm_up_starts_at_the_full_rate():
    assert lr_factor(0, 0, 10, "constant") == 1.0
    assert lr_factor(0, 0, 10, "cosine") == 1.0


def test_the_scheduler_sets_the_optimizers_rate_step_by_step():
    cfg = Optim.with_defaults("optim", {"name": "sgd", "lr": 0.2, "momentum": 0.0, "weight_decay": 0.0,
                                        "warmup_steps": 2, "schedule": "cosine"})
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = make_optimizer(cfg, [param])
    scheduler = make_scheduler(cfg, optimizer, total_steps=6)
    rates = []
    for _ in range(6):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    expected = [0.2 * lr_factor(s, 2, 6, "cosine") for s in range(6)]
    assert rates == pytest.approx(expected)
    assert rates[1] == pytest.approx(0.2) and rates[4] == pytest.approx(0.2 * 0.5 * (1 + math.cos(math.pi * 0.5)))


def test_adamw_unless_sgd():
    cfg = Optim.with_defaults("optim", {"name": "adamw", "lr": 1e-3})
    assert isinstance(make_optimizer(cfg, [torch.nn.Parameter(torch.zeros(1))]), torch.optim.AdamW)

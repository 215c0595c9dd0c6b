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


def stepped_rates(optimizer, scheduler, steps: int) -> list[float]:
    """The learning rate of each of `steps` optimizer steps, the schedule stepped after each."""
    rates = []
    for _ in range(steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


def test_the_scheduler_sets_the_optimizers_rate_step_by_step():
    cfg = Optim.with_defaults("optim", {"name": "sgd", "lr": 0.2, "momentum": 0.0, "weight_decay": 0.0,
                                        "warmup_steps": 2, "schedule": "cosine"})
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = make_optimizer(cfg, torch.nn.ParameterList([param]))
    rates = stepped_rates(optimizer, make_scheduler(cfg, optimizer, total_steps=6), 6)
    expected = [0.2 * lr_factor(s, 2, 6, "cosine") for s in range(6)]
    assert rates == pytest.approx(expected)
    assert rates[1] == pytest.approx(0.2) and rates[4] == pytest.approx(0.2 * 0.5 * (1 + math.cos(math.pi * 0.5)))


def test_adamw_unless_sgd():
    cfg = Optim.with_defaults("optim", {"name": "adamw", "lr": 1e-3})
    assert isinstance(make_optimizer(cfg, torch.nn.Linear(1, 1)), torch.optim.AdamW)


def test_linear_falls_from_one_after_warm_up_to_zero_at_the_end():
    assert [lr_factor(s, 2, 6, "linear") for s in range(7)] == [0.5, 1.0, 1.0, 0.75, 0.5, 0.25, 0.0]


MINE = '''
import torch


def schedule(step, total_steps, cfg):
    return 0.5 ** (step // cfg["warmup_steps"])      # halves every warm-up length


def optimizer(model, cfg):
    names = [name for name, _ in model.named_parameters()]
    assert names == ["weight", "bias"], names          # the module's own names
    return torch.optim.SGD(model.parameters(), lr=cfg["lr"] * 10)


def not_an_optimizer(model, cfg):
    return [p for p in model.parameters()]
'''


def test_a_users_schedule_follows_the_warm_up_and_a_users_optimizer_gets_the_model_and_the_config(
        tmp_path, monkeypatch):
    (tmp_path / "mine.py").write_text(MINE)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = Optim.with_defaults("optim", {"name": "mine:optimizer", "lr": 0.01, "warmup_steps": 2,
                                        "schedule": "mine:schedule"})
    optimizer = make_optimizer(cfg, torch.nn.Linear(3, 1))
    assert isinstance(optimizer, torch.optim.SGD) and optimizer.defaults["lr"] == pytest.approx(0.1)
    rates = stepped_rates(optimizer, make_scheduler(cfg, optimizer, total_steps=10), 7)
    assert rates == pytest.approx([0.05, 0.1, 0.05, 0.05, 0.025, 0.025, 0.0125])   # warm-up, then its own
    with pytest.raises(TypeError, match="optim.name mine:not_an_optimizer returned list, not a torch.optim"):
        make_optimizer(cfg.replace(name="mine:not_an_optimizer"), torch.nn.Linear(3, 1))


def test_no_decay_norm_bias_puts_biases_and_norm_weights_in_a_group_without_weight_decay():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4), torch.nn.Conv2d(1, 2, 3))
    cfg = Optim.with_defaults("optim", {"weight_decay": 0.1, "no_decay_norm_bias": True})
    decayed, free = make_optimizer(cfg, model).param_groups
    assert decayed["weight_decay"] == 0.1 and free["weight_decay"] == 0.0
    assert {id(p) for p in decayed["params"]} == {id(model[0].weight), id(model[2].weight)}
    assert len(free["params"]) == 4   # two biases, the norm's weight and bias
    assert len(make_optimizer(cfg.replace(no_decay_norm_bias=False), model).param_groups) == 1

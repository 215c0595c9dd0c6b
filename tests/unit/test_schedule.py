"""schedule.py: when to save, and where a resumed run continues."""
from airetrain.schedule import Position, SavePolicy

from conftest import run_config


def saves(policy: SavePolicy, steps_per_epoch: int) -> list[int]:
    """The steps after which the policy saves, over a whole run."""
    out, step = [], 0
    for epoch in range(policy.epochs):
        for in_epoch in range(1, steps_per_epoch + 1):
            step += 1
            if policy.due(step, epoch, epoch_end=in_epoch == steps_per_epoch):
                out.append(step)
    return out


def test_every_epoch_by_default_and_the_last_always():
    assert saves(SavePolicy(every_steps=0, every_epochs=1, epochs=3), 4) == [4, 8, 12]
    assert saves(SavePolicy(every_steps=0, every_epochs=2, epochs=3), 4) == [8, 12]


def test_every_n_steps_as_well():
    assert saves(SavePolicy(every_steps=3, every_epochs=5, epochs=2), 4) == [3, 6, 8]


def test_from_config():
    cfg = run_config({"checkpoint": {"every_steps": 7, "every_epochs": 2}, "train": {"epochs": 9}})
    assert SavePolicy.from_config(cfg) == SavePolicy(7, 2, 9)


def test_a_fresh_start_is_at_zero():
    assert Position.resumed(None, 10) == Position(0, 0, 0)


def test_mid_epoch_resume_continues_in_that_epoch():
    assert Position.resumed({"step": 13, "epoch": 1, "step_in_epoch": 3}, 10) == Position(13, 1, 3)


def test_a_checkpoint_at_an_epoch_end_continues_with_the_next_epoch():
    assert Position.resumed({"step": 20, "epoch": 1, "step_in_epoch": 10}, 10) == Position(20, 2, 0)

"""TensorBoard curves: a resumed session logs again the steps after its checkpoint, and TensorBoard's
reader keeps each step once (the purge at the resumed session's first step)."""
from airetrain.train.curves import Curves


def test_a_resumed_session_replaces_the_steps_logged_after_its_checkpoint(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    first = Curves(tmp_path, resumed_step=0)
    for step in range(1, 9):                       # killed after step 8, its checkpoint at step 5
        first.log(step, {"loss": 1.0, "lr": 0.1, "elapsed_s": 3.0})
    resumed = Curves(tmp_path, resumed_step=5)
    for step in range(6, 11):
        resumed.log(step, {"loss": 0.5, "lr": 0.1})
    resumed.log(10, {"eval_loss": 0.4, "eval_dice": 0.8})
    first.close()
    resumed.close()
    raw = [e.summary.value[0].tag + f"@{e.step}" for p in sorted(tmp_path.glob("events.*"))
           for e in EventFileLoader(str(p)).Load() if e.summary.value]
    assert raw.count("train/loss@7") == 2   # both sessions wrote step 7
    curves = EventAccumulator(str(tmp_path))
    curves.Reload()
    loss = curves.Scalars("train/loss")
    assert [e.step for e in loss] == list(range(1, 11))
    assert [e.value for e in loss] == [1.0] * 5 + [0.5] * 5   # the resumed session's values won
    assert set(curves.Tags()["scalars"]) == {"train/loss", "train/lr", "eval/loss", "eval/dice"}

"""The trainer's pieces, in this process as rank 0 of a one-rank gloo group (no torchrun):
train/step.py, train/evaluate.py, train/progress.py and train/summary.py."""

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from airetrain import records
from airetrain.rundir import metrics_log
from airetrain.checkpoint.background import WritePath
from airetrain.schedule import Position
from airetrain.train.parallel.process_group import Dist
from airetrain.train.evaluate import evaluate
from airetrain.train.objective import Objective
from airetrain.train.parallel.wrap import Parallel
from airetrain.train.progress import Progress
from airetrain.train.step import train_step
from airetrain.train.session import Session
from airetrain.train.summary import Finish, gathered_figures, train_record

from conftest import make_plan

D = Dist(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"))
PLAN = make_plan({"processes": 1, "strategy": "ddp", "precision": "fp32", "batch": {"global": 8, "per_device": 4},
                  "train": {"log_every_steps": 2, "epochs": 1}}, Path("/tmp/airetrain-unit"))
BUILT_IN = Objective(PLAN.config.train, PLAN.config.model)


def linear(seed=0):
    torch.manual_seed(seed)
    return nn.Linear(3, 2)


def sgd_step(model, x, y):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    return optimizer, scheduler, scaler


def test_two_accumulated_micro_batches_make_the_step_of_their_whole_batch(process_group):
    x, y = torch.randn(8, 3), torch.randint(0, 2, (8,))
    accumulated, whole = linear(), linear()
    optimizer, scheduler, scaler = sgd_step(accumulated, x, y)
    session = Session(PLAN, D, None, Parallel(accumulated, PLAN, D.device), BUILT_IN, optimizer, scheduler, scaler,
                      probe=None, flops_per_micro=0)
    loss, wait_s, norm = train_step(session, iter([(x[:4], y[:4]), (x[4:], y[4:])]))

    reference = torch.optim.SGD(whole.parameters(), lr=0.5)
    expected_loss = nn.functional.cross_entropy(whole(x), y)
    expected_loss.backward()
    reference.step()
    assert loss.item() == pytest.approx(expected_loss.item(), rel=1e-6)
    for a, b in zip(accumulated.parameters(), whole.parameters()):
        torch.testing.assert_close(a, b)
    assert wait_s >= 0 and all(p.grad is None for p in accumulated.parameters())   # gradients cleared
    assert scheduler.last_epoch == 1
    assert norm is None   # neither clipped nor logged: not measured


def stepped(clip, x, y, seed=0):
    """One SGD step (lr 0.5) of a fresh linear model under optim.grad_clip_norm: clip; its parameters
    before and after, and the norm the step measured (norm_wanted: as on a logged step)."""
    plan = make_plan({"processes": 1, "strategy": "ddp", "precision": "fp32", "batch": {"global": 8, "per_device": 8},
                      "optim": {"grad_clip_norm": clip}}, Path("/tmp/airetrain-unit"))
    model = linear(seed)
    before = [p.detach().clone() for p in model.parameters()]
    session = Session(plan, D, None, Parallel(model, plan, D.device), BUILT_IN, *sgd_step(model, x, y),
                      probe=None, flops_per_micro=0)
    _, _, norm = train_step(session, iter([(x, y)]), norm_wanted=True)
    return before, list(model.parameters()), norm


def test_a_tiny_clip_norm_leaves_the_weights_almost_where_they_started_and_no_clip_moves_them(process_group):
    x, y = torch.randn(8, 3) * 10, torch.randint(0, 2, (8,))
    before, clipped, norm = stepped(1e-6, x, y)
    _, free, free_norm = stepped(None, x, y)
    reference = linear()
    expected = torch.nn.utils.get_total_norm(torch.autograd.grad(nn.functional.cross_entropy(reference(x), y),
                                                                 list(reference.parameters())))
    assert norm.item() == pytest.approx(expected.item(), rel=1e-5) == pytest.approx(free_norm.item(), rel=1e-5)
    assert norm.item() > 1e-3   # the norm before clipping (1e-6 after)
    moved = sum((a - b).abs().sum().item() for a, b in zip(clipped, before))
    assert moved <= 0.5 * 1e-6 * 3 + 1e-7   # at most lr x the clip norm, over the parameters
    assert sum((a - b).abs().sum().item() for a, b in zip(free, before)) > 0.1


def test_evaluate_scores_every_sample_once(process_group):
    model = linear()
    with torch.no_grad():     # class 1 wins wherever the first input is positive
        model.weight.copy_(torch.tensor([[0.0, 0, 0], [1.0, 0, 0]]))
        model.bias.zero_()
    x = torch.tensor([[1.0, 0, 0], [-1.0, 0, 0], [2.0, 0, 0], [-3.0, 0, 0], [0.5, 0, 0]])
    y = torch.tensor([1, 0, 0, 0, 1])   # the third is wrong: 4 of 5 right
    result = evaluate(Parallel(model, PLAN, D.device), BUILT_IN, TensorDataset(x, y), D, "fp32")
    assert result["metrics"] == {"accuracy": pytest.approx(0.8)}
    assert result["loss"] == pytest.approx(nn.functional.cross_entropy(model(x), y).item(), rel=1e-5)
    assert model.training   # back in training mode


def test_progress_logs_every_n_steps_and_the_last_with_the_windows_mean_loss(process_group, tmp_path):
    plan = PLAN.replace(durable_dir=tmp_path / "durable")
    progress = Progress(D, plan, total_steps=5, metrics_path=tmp_path / "metrics.jsonl")
    for step, loss in enumerate([1.0, 3.0, 5.0, 7.0, 9.0], start=1):
        progress.step_done(step, 0, torch.tensor(loss), wait_s=0.25, step_s=1.0)
        if step == 3:   # an evaluation during training: a line of its own
            progress.evaluated(3, 0, {"loss": 0.7, "metrics": {"accuracy": 0.5}})
    progress.evaluated(5, 0, {"loss": 0.5, "metrics": {"accuracy": 0.75}})   # the final one joins the last line
    progress.close()
    lines = metrics_log.read(tmp_path / "metrics.jsonl")
    assert (tmp_path / "durable/metrics.jsonl").read_text() == (tmp_path / "metrics.jsonl").read_text()
    assert [line["step"] for line in lines] == [2, 3, 4, 5]
    train = [line for line in lines if "loss" in line]
    assert [line["loss"] for line in train] == [2.0, 6.0, 9.0]
    assert all(line["data_wait_frac"] == 0.25 for line in train)
    assert {k: lines[1][k] for k in ("epoch", "eval_loss", "eval_accuracy")} == {"epoch": 0, "eval_loss": 0.7,
                                                                                   "eval_accuracy": 0.5}
    assert lines[-1]["eval_loss"] == 0.5 and lines[-1]["eval_accuracy"] == 0.75 and "eval_loss" not in lines[0]
    assert progress.steps == 5 and progress.loss == 9.0
    assert progress.warmup_steps == 1 and 0 < progress.warmup_s   # a fifth of 5 steps


def test_the_warm_up_is_a_fifth_of_the_session_at_most_ten_steps():
    from airetrain.train.progress import warmup_steps
    assert [warmup_steps(n) for n in (0, 1, 2, 9, 10, 49, 50, 1000)] == [0, 0, 0, 1, 2, 9, 10, 10]


def test_gpt_flops_match_the_analytic_count():
    """The counted FLOPs of one forward and backward against 6 N T + 12 L T s d: the matmul weights N,
    the tied head included; T tokens; attention over s positions at width d, counted in full as the
    kernels compute it, its backward twice its forward (the model's FLOPs, not a kernel's recomputation)."""
    from airetrain.train.efficiency import count_flops
    from airetrain.train.models import build_model

    vocab, seq, width, depth, batch = 512, 64, 64, 3, 4
    model = build_model({"name": "gpt", "width": width, "depth": depth, "heads": 4}, {"vocab": vocab, "seq_len": seq})
    tokens = torch.randint(0, vocab, (batch, seq + 1))
    counted = count_flops(model, BUILT_IN, (tokens[:, :-1], tokens[:, 1:]))
    matmul_weights = depth * 12 * width ** 2 + vocab * width
    T = batch * seq
    analytic = 6 * matmul_weights * T + 12 * depth * T * seq * width
    assert counted == pytest.approx(analytic, rel=1e-3), (counted, analytic)


def test_train_record_is_a_complete_train_json_with_per_step_figures(process_group):
    progress = SimpleNamespace(steps=4, wait_s=1.0, step_s=4.0, loss=0.5, warmup_steps=1, warmup_s=2.0)
    figures = gathered_figures(D, progress, {"gpu_util_mean": None, "gpu_mem_peak_bytes": None})
    checkpoints = SimpleNamespace(stalls=[0.1, 0.3], latest={"path": "/x/step-00000010.pt"},
                                  path=WritePath("synchronous", "auto: the ranks keep all 2 cores busy"))
    data = SimpleNamespace(meta={"shape": [3], "classes": 2}, steps_per_epoch=4)
    session = Session(PLAN, D, data, Parallel(linear(), PLAN, D.device),
                      BUILT_IN, None, None, None, probe=None, flops_per_micro=1000, position=Position(10, 0, 10))
    record = train_record(session, progress, checkpoints, Finish(
        train_s=8.0, final_wait_s=0.5, figures=figures, evaluation={"loss": 0.6, "metrics": {"accuracy": 0.75}},
        hosts=["h"]))
    records.check(records.TrainRecord, record)   # every field of the definition, no other
    assert record["resumed_from_step"] == 6 and record["steps_this_session"] == 4
    assert record["samples_per_s"] == 4 * 8 / 8.0 and record["step_time_s"] == 1.0
    assert record["data_wait_s_per_step"] == 0.25 and record["compute_s_per_step"] == 0.75
    assert record["data_wait_frac"] == 0.25 and record["flops_per_step"] == 2000
    assert record["mfu"] is None and record["achieved_tflops"] == round(2000 * 4 / 8.0 / 1e12, 3)
    assert record["checkpoint_saves"] == 2 and record["checkpoint_stall_s_mean"] == 0.2
    assert record["checkpoint_writer"] == "synchronous" and "busy" in record["checkpoint_writer_reason"]
    # the steady state: the 3 steps after the 1-step warm-up, in the 6 s after its 2 s
    assert (record["warmup_steps"], record["steady_steps"], record["steady_s"]) == (1, 3, 6.0)
    assert record["steady_samples_per_s"] == 3 * 8 / 6.0 and record["steady_mfu"] is None
    assert record["steady_achieved_tflops"] == round(2000 * 3 / 6.0 / 1e12, 3)
    assert record["eval_accuracy"] == 0.75 and record["eval_loss"] == 0.6 and record["final_loss"] == 0.5


def test_the_faster_paths_are_options_that_take_effect(process_group):
    from airetrain.plan.planner import plan_all
    from airetrain.train import batches
    from airetrain.train.models import build_model
    from airetrain.train.optim import make_optimizer
    from airetrain.train.parallel.wrap import Parallel

    plan = plan_all({"runs": {"r": {"processes": 1, "strategy": "ddp", "channels_last": True, "ddp_bucket_mb": 50,
                                    "optim": {"fused": True}}}}, env={"HOME": "/nonexistent"})["r"]
    model = build_model(plan.config.model, {"shape": [1, 8, 8], "classes": 10})
    par = Parallel(model, plan, torch.device("cpu"))
    conv = next(m for m in model.modules() if isinstance(m, nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert par.wrapped.bucket_bytes_cap == 50 * 1024 * 1024
    x, y = batches.to_device((torch.randn(4, 1, 8, 8).permute(0, 1, 3, 2), torch.arange(4)), torch.device("cpu"),
                             par.memory_format)
    assert x.is_contiguous(memory_format=torch.channels_last) and y.dim() == 1   # images only
    assert make_optimizer(plan.config.optim, model).defaults["fused"] is True
    # null: fused on CPU, where it was measured faster; torch's own choice on CUDA until measured there
    unset = plan.config.optim.replace(fused=None)
    assert make_optimizer(unset, model, "cpu").defaults["fused"] is True
    assert make_optimizer(unset, model, "cuda").defaults["fused"] is None
    assert not make_optimizer(unset.replace(fused=False), model).defaults["fused"]


@pytest.mark.parametrize("run, message", [
    ({"channels_last": True, "model": {"name": "gpt"}, "data": {"name": "synthetic", "vocab": 64}},
     "runs.r.channels_last applies to 2D convolutional models"),
    ({"channels_last": True, "model": {"name": "unet", "dims": 3}, "data": {"name": "shapes3d"}},
     "not to unet with dims: 3"),
    ({"ddp_bucket_mb": 100, "strategy": "fsdp"}, "runs.r.ddp_bucket_mb applies to DDP"),
])
def test_faster_paths_where_they_cannot_apply_are_refused(run, message):
    from airetrain.errors import ConfigError
    from airetrain.plan.planner import plan_all

    with pytest.raises(ConfigError, match=message):
        plan_all({"runs": {"r": run}}, env={"HOME": "/nonexistent"})

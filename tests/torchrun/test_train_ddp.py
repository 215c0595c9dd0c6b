"""A real 2-process torchrun DDP run (gloo on CPU): replicas agree, the model learns, metrics are sane."""
import json
from pathlib import Path

import pytest
import torch

from airetrain.checkpoint import store

from conftest import launch_training, read_json


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ddp")
    cfg = {"processes": 2, "batch": {"global": 64, "per_device": 16}, "train": {"epochs": 4, "log_every_steps": 5}}
    out, proc = launch_training(tmp, cfg, dump=tmp / "params")
    return tmp, out, proc


def test_parameters_identical_on_both_ranks(ddp_run):
    tmp, out, _ = ddp_run
    r0 = torch.load(tmp / "params" / "rank0.pt", weights_only=True)
    r1 = torch.load(tmp / "params" / "rank1.pt", weights_only=True)
    assert r0.keys() == r1.keys() and len(r0) > 0
    for key in r0:
        assert torch.equal(r0[key], r1[key]), key


def test_training_learns_and_uses_accumulation(ddp_run):
    _, out, proc = ddp_run
    summary = read_json(out / "train.json")
    assert summary["world_size"] == 2 and summary["grad_accum"] == 2  # 64 = 16 x 2 x 2
    assert summary["eval_accuracy"] > 0.85
    lines = [m for m in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "loss" in m]
    assert lines[0]["loss"] > lines[-1]["loss"]
    assert [m["step"] for m in lines] == sorted(m["step"] for m in lines)
    assert all(m["grad_norm"] > 0 for m in lines)   # measured on every logged step, without clipping too
    progress = [line for line in proc.stdout.splitlines() if "samples/s" in line]
    assert progress and all(line.startswith("[rank 0]") for line in progress)  # rank 0 logs alone
    assert any("ETA" in line and "loss" in line for line in progress)


def test_an_evaluation_at_every_epochs_end_in_metrics_jsonl_and_tensorboard(ddp_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, out, proc = ddp_run
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evaluations = [line for line in lines if "eval_loss" in line]
    per_epoch = 1437 // 64
    assert [line["step"] for line in evaluations] == [per_epoch * e for e in (1, 2, 3, 4)]
    assert [line["epoch"] for line in evaluations] == [0, 1, 2, 3]
    assert all(0 < line["eval_accuracy"] <= 1 for line in evaluations)
    assert "loss" in evaluations[-1]   # the final one shares the last step's line
    curves = EventAccumulator(str(out / "tensorboard"))
    curves.Reload()
    assert [e.step for e in curves.Scalars("eval/loss")] == [line["step"] for line in evaluations]
    summary = read_json(out / "train.json")
    assert summary["evaluations"] == 4 and summary["eval_s"] > 0
    assert summary["eval_loss"] == evaluations[-1]["eval_loss"]   # the final evaluation, not a fifth one
    assert "no validation split: the evaluations during training run on the test split" in proc.stdout
    # the last line (the final evaluation's) was on disk, in both histories, before train.json was: a kill
    # between them would otherwise lose it for good (a rerun resumes at the last step and trains nothing)
    durable_lines = Path(summary["checkpoint"]["path"]).parents[1] / "metrics.jsonl"
    for history in (out / "metrics.jsonl", durable_lines):
        assert history.stat().st_mtime_ns <= (out / "train.json").stat().st_mtime_ns, history
    # the default monitor (eval_loss, min): the best is where the curve is lowest, kept and listed
    lowest = min(evaluations, key=lambda line: line["eval_loss"])
    assert summary["best"] == {"step": lowest["step"], "epoch": lowest["epoch"], "metric": "eval_loss",
                               "value": lowest["eval_loss"]}
    durable = Path(summary["checkpoint"]["path"]).parent
    best = [e for e in store.entries(durable) if e["step"] == lowest["step"]]
    assert len(best) == 1 and best[0]["best"]["step"] == lowest["step"]
    store.verify(durable / best[0]["file"], best[0])


def test_train_json_has_every_field_with_plausible_values(ddp_run):
    _, out, _ = ddp_run
    s = read_json(out / "train.json")
    for key in ("world_size", "nodes", "strategy", "precision", "global_batch", "per_device_batch", "grad_accum",
                "steps", "epochs", "samples_per_s", "data_wait_frac", "peak_mem_bytes", "final_loss",
                "eval_accuracy", "slurm_job_id", "hostnames", "torch_version"):
        assert key in s, key
    assert s["samples_per_s"] > 0 and 0 <= s["data_wait_frac"] <= 1
    assert s["peak_mem_bytes"] > 10 << 20 and s["slurm_job_id"] is None
    assert s["steps"] == 4 * (1437 // 64) and s["precision"] == "bf16"
    assert s["torch_version"] == torch.__version__


CLIP = 0.5   # below most of these runs' gradient norms: the clipping bites


@pytest.fixture(scope="module")
def fsdp_vs_ddp(tmp_path_factory):
    """The same run (fp32, same seed, same global batch, gradients clipped) under DDP and under FSDP2."""
    runs = {}
    for strategy in ("ddp", "fsdp"):
        tmp = tmp_path_factory.mktemp(strategy)
        cfg = {"processes": 2, "strategy": strategy, "precision": "fp32", "optim": {"grad_clip_norm": CLIP},
               "batch": {"global": 64, "per_device": 16},
               "train": {"epochs": 2, "log_every_steps": 2, "eval_every_steps": 10}}
        out, _ = launch_training(tmp, cfg, dump=tmp / "params")
        runs[strategy] = (tmp, out)
    return runs


def test_fsdp_ends_with_identical_full_parameters_on_every_rank(fsdp_vs_ddp):
    tmp, _ = fsdp_vs_ddp["fsdp"]
    r0, r1 = (torch.load(tmp / "params" / f"rank{r}.pt", weights_only=True) for r in (0, 1))
    assert r0.keys() == r1.keys() and all(torch.equal(r0[k], r1[k]) for k in r0)
    assert not any(k.startswith("module.") or "_fsdp" in k for k in r0)  # plain names, loadable anywhere


def test_ddp_and_fsdp_clip_by_the_same_global_norm_and_follow_the_same_curves(fsdp_vs_ddp):
    curves, norms = {}, {}
    for strategy, (_, out) in fsdp_vs_ddp.items():
        lines = [m for m in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "loss" in m]
        curves[strategy] = [line["loss"] for line in lines]
        norms[strategy] = [line["grad_norm"] for line in lines]
    assert len(curves["ddp"]) == len(curves["fsdp"]) > 5
    for a, b in zip(curves["ddp"], curves["fsdp"]):
        assert b == pytest.approx(a, rel=1e-3, abs=1e-4)
    # every 10 steps and at each epoch's end (22 steps), over both ranks' shares, the same under both
    evals = {strategy: [(m["step"], m["eval_loss"]) for m in map(json.loads, (out / "metrics.jsonl").read_text()
                        .splitlines()) if "eval_loss" in m] for strategy, (_, out) in fsdp_vs_ddp.items()}
    assert [step for step, _ in evals["ddp"]] == [step for step, _ in evals["fsdp"]] == [10, 20, 22, 30, 40, 44]
    assert [loss for _, loss in evals["fsdp"]] == pytest.approx([loss for _, loss in evals["ddp"]], rel=1e-3)
    # FSDP's norm is reduced over both ranks' shards: the same as DDP's over whole gradients
    assert norms["fsdp"] == pytest.approx(norms["ddp"], rel=1e-3)
    assert sum(norm > CLIP for norm in norms["ddp"]) >= len(norms["ddp"]) // 2   # the clipping bit
    ddp_params = torch.load(fsdp_vs_ddp["ddp"][0] / "params" / "rank0.pt", weights_only=True)
    fsdp_params = torch.load(fsdp_vs_ddp["fsdp"][0] / "params" / "rank0.pt", weights_only=True)
    for key in ddp_params:
        torch.testing.assert_close(fsdp_params[key], ddp_params[key], rtol=1e-3, atol=1e-4)


def test_fsdp_checkpoint_is_sharded_and_converts_to_a_plain_full_state_dict(fsdp_vs_ddp, tmp_path):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    _, out = fsdp_vs_ddp["fsdp"]
    summary = read_json(out / "train.json")
    path = Path(summary["checkpoint"]["path"])
    assert summary["checkpoint"]["kind"] == "dcp" and path.is_dir()
    assert {"__0_0.distcp", "__1_0.distcp", ".metadata", "trainer.pt"} <= set(summary["checkpoint"]["files"])
    dcp_to_torch_save(path, tmp_path / "full.pt")
    state = torch.load(tmp_path / "full.pt", weights_only=True)
    from airetrain.train.models import build_model
    model = build_model({"name": "small_cnn", "width": 32}, {"shape": [1, 8, 8], "classes": 10})
    model.load_state_dict(state["model"])  # strict: every key, unsharded shapes
    assert summary["strategy"] == "fsdp" and summary["eval_accuracy"] > 0.8


def test_a_longer_rerun_resumes_from_the_checkpoint(tmp_path):
    """Raising epochs continues from the newest checkpoint (same training config) instead of restarting;
    another config never resumes. (FSDP's resumes: test_checkpoint.py's kill tests; a longer rerun on two
    nodes: test_slurm.py.)"""
    cfg = {"processes": 2, "precision": "fp32", "batch": {"global": 64, "per_device": 32},
           "train": {"epochs": 1, "log_every_steps": 5}}
    out, _ = launch_training(tmp_path, cfg)
    first = read_json(out / "train.json")
    out, proc = launch_training(tmp_path, {**cfg, "train": {"epochs": 2, "log_every_steps": 5}})
    second = read_json(out / "train.json")
    assert second["resumed_from_step"] == first["steps"] == 22
    assert second["steps"] == 44 and second["steps_this_session"] == 22
    assert "resumed from" in proc.stdout
    changed, proc = launch_training(tmp_path, {**cfg, "optim": {"lr": 0.001}})   # another checkpoint fingerprint
    assert read_json(changed / "train.json")["resumed_from_step"] == 0   # another config never resumes


def test_bf16_on_a_cpu_without_native_bf16_says_fp32_is_faster_here(ddp_run):
    """The run above has the default precision, bf16. This machine's flags decide whether the warning
    is due: on a CPU with avx512_bf16 or amx_bf16 it must not appear, on one without it must."""
    from airetrain.cluster.hardware import cpu_bf16_native

    _, out, proc = ddp_run
    assert read_json(out / "train.json")["precision"] == "bf16"
    warned = "autocast emulates it, several times slower than fp32 here" in proc.stdout
    assert warned == (cpu_bf16_native() is False), proc.stdout[-2000:]
    assert proc.stdout.count("autocast emulates it") <= 1   # rank 0 alone, once


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_promote_writes_model_safetensors_that_loads_into_a_fresh_model_with_the_same_outputs(fsdp_vs_ddp,
                                                                                                strategy):
    import hashlib

    from safetensors.torch import load_file

    from airetrain.train.models import build_model
    from conftest import BIN, run

    tmp, out = fsdp_vs_ddp[strategy]
    run([str(BIN / "airetrain"), "promote", "--plan", str(out / "plan.json"), "--train", str(out / "train.json"),
         "--out", str(out / "checkpoint.json")])
    weights = read_json(out / "checkpoint.json")["weights"]
    path = Path(weights["path"])
    assert path.name == "model.safetensors" and path.parent == Path(read_json(out / "checkpoint.json")["path"]).parent
    assert hashlib.sha256(path.read_bytes()).hexdigest() == weights["sha256"]
    loaded = load_file(path)
    assert not any(k.startswith("module.") or "_fsdp" in k for k in loaded)   # the module's own names
    spec = ({"name": "small_cnn", "width": 32}, {"shape": [1, 8, 8], "classes": 10})
    fresh, trained = build_model(*spec), build_model(*spec)
    fresh.load_state_dict(loaded)   # strict: every key, whole tensors
    trained.load_state_dict(torch.load(tmp / "params" / "rank0.pt", weights_only=True))   # the trainer's own
    x = torch.randn(16, 1, 8, 8)
    fresh.eval(), trained.eval()
    assert torch.equal(fresh(x), trained(x))

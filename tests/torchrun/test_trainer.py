"""The trainer's options: strategy auto, precisions, built-in and user models and datasets, metrics."""
import json
import math
import textwrap

import pytest
import torch

from airetrain.plan import config
from airetrain.errors import ConfigError
from airetrain.builtin_models import MODELS
from airetrain.train.models import build_model
from airetrain.commands.resolve import resolve_plan
from airetrain.plan.planner import plan_all

from conftest import ENV, launch_training, read_json

SYNTHETIC = {"name": "synthetic", "samples": 256, "shape": [3, 16, 16], "classes": 10}


def plan(run_cfg):
    """The plan as plan.json holds it: auto decided."""
    return resolve_plan(plan_all({"runs": {"r": run_cfg}}, env=ENV)["r"])


def test_auto_picks_fsdp_when_the_estimate_exceeds_the_budget_and_ddp_otherwise():
    gpt = {"gpus": 3, "model": {"name": "gpt", "width": 256, "depth": 4, "heads": 4},
           "data": {"name": "synthetic", "vocab": 1000, "seq_len": 64}, "batch": {"global": 96, "per_device": 32}}
    roomy, tight = plan({**gpt, "strategy": "auto"}), plan({**gpt, "strategy": "auto", "memory_budget_gb": 0.05})
    assert roomy.strategy == "ddp" and tight.strategy == "fsdp"
    est = tight.memory_estimate
    assert est["parameters"] > 3_000_000 and est["ddp_per_gpu_gb"] > 0.05
    assert est["fsdp_per_gpu_gb"] < est["ddp_per_gpu_gb"] / 1.5   # sharded state, checkpointed activations
    assert "over the 0.05 GB budget" in est["reason"]
    assert tight.activation_checkpointing and not roomy.activation_checkpointing
    assert plan({**gpt, "strategy": "ddp"}).memory_estimate is None  # asked for: no estimate
    cpu = plan({"strategy": "auto"})
    assert cpu.strategy == "ddp" and cpu.memory_estimate["reason"].startswith("CPU run")


def test_estimate_counts_parameters_exactly():
    est = plan({"gpus": 1, "strategy": "auto", "model": {"name": "resnet18", "width": 16}, "data": SYNTHETIC,
                "batch": {"global": 64, "per_device": 32}}).memory_estimate
    model = build_model({"name": "resnet18", "width": 16}, {"shape": [3, 16, 16], "classes": 10})
    assert est["parameters"] == sum(p.numel() for p in model.parameters())
    assert est["state_gb"] == round(est["parameters"] * 16 / 1e9, 3)  # fp32 weights + grads + 2 Adam moments


@pytest.mark.parametrize("bad,message", [
    ({"strategy": "fsdp", "precision": "fp16"}, "fp16' with FSDP is not supported"),
    ({"strategy": "fsdp", "fsdp_cpu_offload": True}, "fsdp_cpu_offload needs a GPU"),
    ({"gpus": 1, "strategy": "auto", "memory_budget_gb": 0.001, "precision": "fp16",
      "batch": {"global": 32, "per_device": 32}}, "after the memory estimate chose FSDP"),
    ({"model": {"name": "vit", "width": 30, "heads": 4}}, "heads = 4 does not divide model.width = 30"),
])
def test_impossible_trainer_options_are_refused(bad, message):
    with pytest.raises(ConfigError, match=message):
        plan(bad)


def test_tensor_core_unfriendly_sizes_are_warned_about_on_gpus():
    p = plan({"gpus": 1, "model": {"width": 30}, "batch": {"global": 60, "per_device": 30}})
    assert any("model.width = 30 is not a multiple of 8" in w for w in p.warnings)
    assert any("batch.per_device = 30" in w for w in p.warnings)
    assert plan({"gpus": 1, "batch": {"global": 64, "per_device": 32}}).warnings == []


FORWARD_META = {"small_cnn": {"shape": [3, 16, 16], "classes": 10}, "resnet18": {"shape": [3, 16, 16], "classes": 10},
                "vit": {"shape": [3, 16, 16], "classes": 10}, "gpt": {"vocab": 100, "seq_len": 12, "classes": 100}}


@pytest.mark.parametrize("name", sorted(set(MODELS) - {"unet"}))   # unet: tests/unit/test_segmentation.py
def test_built_in_models_run_forward_and_backward(name):
    meta = FORWARD_META[name]   # a model added to the table needs its case here
    _, runs = config.resolve({"runs": {"r": {"model": {"name": name, "width": 32, "depth": 2}}}})
    model = build_model(runs["r"].model, meta)
    x = torch.randint(100, (4, 12)) if name == "gpt" else torch.randn(4, 3, 16, 16)
    out = model(x)
    assert out.shape == ((4, 12, 100) if name == "gpt" else (4, 10))
    out.float().mean().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def logged_losses(out) -> list[float]:
    lines = map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
    return [line["loss"] for line in lines if "loss" in line]   # not the evaluations' lines


def learned(out) -> bool:
    """The loss is finite at every logged step and went down (fp16's GradScaler skipping every step would
    leave it where it started)."""
    losses = logged_losses(out)
    return len(losses) >= 3 and all(math.isfinite(v) for v in losses) and losses[-1] < 0.8 * losses[0]


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp32"])
def test_each_precision_trains(tmp_path, precision):
    out, _ = launch_training(tmp_path, {"precision": precision, "strategy": "ddp", "batch": {"global": 64,
                                        "per_device": 32}, "train": {"epochs": 1, "log_every_steps": 5}})
    s = read_json(out / "train.json")
    assert s["precision"] == precision and s["steps"] == 1437 // 64 and learned(out), logged_losses(out)
    assert s["samples_per_s"] > 0 and 0 <= s["data_wait_frac"] <= 1
    assert s["flops_per_step"] > 0 and s["compute_s_per_step"] > 0
    assert s["mfu"] is None and s["gpu_util_mean"] is None and s["peak_tflops_per_gpu"] is None  # CPU: never invented


def test_gpt_with_fsdp_and_activation_checkpointing_trains(tmp_path):
    out, _ = launch_training(tmp_path, {
        "strategy": "fsdp", "activation_checkpointing": True,
        "model": {"name": "gpt", "width": 64, "depth": 2, "heads": 4},
        "data": {"name": "synthetic", "samples": 128, "vocab": 50, "seq_len": 16},
        "batch": {"global": 32, "per_device": 8}, "train": {"epochs": 2, "log_every_steps": 2}, "precision": "bf16"})
    s = read_json(out / "train.json")
    assert s["strategy"] == "fsdp" and s["activation_checkpointing"] is True and learned(out), logged_losses(out)
    assert s["tokens_per_s"] == pytest.approx(s["samples_per_s"] * 16, rel=0.01)
    assert s["grad_accum"] == 2
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    dcp_to_torch_save(s["checkpoint"]["path"], tmp_path / "full.pt")
    state = torch.load(tmp_path / "full.pt", weights_only=True)
    assert state["model"] and not any("checkpoint_wrapped" in k for k in state["model"])  # plain names


USER_CODE = '''
import torch
from torch import nn
from torch.utils.data import Dataset

class Lines(Dataset):
    """y = 1 when the sum of x is positive."""
    def __init__(self, split, root):
        g = torch.Generator().manual_seed(0 if split == "train" else 1)
        self.x = torch.randn(256, 8, generator=g)
        self.y = (self.x.sum(1) > 0).long()
        self.meta = {"shape": [8], "classes": 2, "made_by": "mylab"}
    def __len__(self):
        return len(self.x)
    def __getitem__(self, i):
        return self.x[i], int(self.y[i])

def dataset(split, root):
    return Lines(split, root)

def model(meta, cfg):
    return nn.Sequential(nn.Linear(meta["shape"][0], cfg["width"]), nn.ReLU(), nn.Linear(cfg["width"], meta["classes"]))
'''


def test_user_model_and_dataset_load_by_import_path(tmp_path):
    (tmp_path / "mylab").mkdir()
    (tmp_path / "mylab" / "__init__.py").write_text("")
    (tmp_path / "mylab" / "code.py").write_text(textwrap.dedent(USER_CODE))
    out, _ = launch_training(tmp_path, {
        "model": {"name": "mylab.code:model", "width": 16}, "data": {"name": "mylab.code:dataset"},
        "strategy": "ddp", "batch": {"global": 32, "per_device": 16}, "train": {"epochs": 8}}, cwd=tmp_path)
    s = read_json(out / "train.json")
    assert s["eval_accuracy"] > 0.8   # it learned the user's task with the user's model


def test_a_bad_import_path_is_refused_by_the_schema():
    with pytest.raises(ConfigError, match="or an import path 'package.module:function'"):
        config.resolve({"runs": {"r": {"model": {"name": "mylab.code"}}}})


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (nccl, CUDA autocast, sm check)")
def test_gpu_path_nccl_bf16_and_arch_check(tmp_path):
    from airetrain.train.parallel.process_group import check_cuda_arch
    check_cuda_arch()
    out, _ = launch_training(tmp_path, {"gpus": 1, "precision": "bf16", "data": SYNTHETIC,
                                        "batch": {"global": 64, "per_device": 32}, "train": {"epochs": 1}})
    s = read_json(out / "train.json")
    assert s["device"] == "cuda" and s["peak_mem_bytes"] > 0 and s["flops_per_step"] > 0
    if s["peak_tflops_per_gpu"]:
        assert 0 < s["mfu"] < 1

"""train/plan_check.py: the user's code tried at plan time, so that code that cannot work is refused
before the run waits in the GPU queue. Each module here is written the way users write theirs."""
import itertools

import pytest

from airetrain.commands.resolve import resolve_plan
from airetrain.plan.planner import plan_all
from airetrain.train.plan_check import UserCodeError, needs_check
from conftest import ENV

GOOD = """
import torch
from torch import nn
from torch.utils.data import Dataset


class Points(Dataset):
    meta = {"shape": [4], "classes": 2}

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.randn(4), i % 2


def data(split, root):
    return Points()


def model(meta, cfg):
    return nn.Linear(meta["shape"][0], meta["classes"])
"""
COUNTER = itertools.count()


def plan_with(tmp_path, monkeypatch, source: str, run: dict):
    """A run whose code is a fresh module (a new name each time: imports are cached) written from source."""
    name = f"mylab{next(COUNTER)}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    text = repr(run).replace("mylab", name)
    return plan_all({"runs": {"r": eval(text)}}, env=ENV)["r"], name


GPU_RUN = {"gpus": 3, "strategy": "auto", "model": {"name": "mylab:model"}, "data": {"name": "mylab:data"},
           "batch": {"global": 12, "per_device": 4}}
CPU_RUN = {"processes": 2, "model": {"name": "mylab:model"}, "data": {"name": "mylab:data"},
           "batch": {"global": 8, "per_device": 4}}


@pytest.mark.parametrize("run", [GPU_RUN, CPU_RUN], ids=["gpus-3-auto", "cpu"])
def test_a_model_module_that_raises_on_import_is_refused_naming_the_key(tmp_path, monkeypatch, run, capsys):
    plan, name = plan_with(tmp_path, monkeypatch, "raise RuntimeError('no such checkpoint: /home/me/w.pt')\n", run)
    with pytest.raises(UserCodeError) as refused:
        resolve_plan(plan)
    message = str(refused.value)
    assert message.startswith(f"runs.r.model.name: {name}:model does not import at plan time: ")
    assert "RuntimeError: no such checkpoint: /home/me/w.pt" in message and "nothing of this run" in message
    assert "Traceback" in capsys.readouterr().err   # the plan step's log holds the traceback


def test_a_builder_that_raises_fails_the_plan_never_falls_back_to_ddp(tmp_path, monkeypatch):
    source = GOOD.replace('    return nn.Linear(meta["shape"][0], meta["classes"])',
                          '    return nn.Linear(meta["width"], meta["classes"])')   # a KeyError of its own
    plan, name = plan_with(tmp_path, monkeypatch, source, GPU_RUN)
    with pytest.raises(UserCodeError, match=rf"runs.r.model.name: {name}:model raised while building the model "
                                            r"at plan time: KeyError: 'width'"):
        resolve_plan(plan)


def test_a_dataset_builder_that_raises_is_refused(tmp_path, monkeypatch):
    source = GOOD.replace("    return Points()", "    return Points(root)")   # TypeError: takes no arguments
    plan, name = plan_with(tmp_path, monkeypatch, source, CPU_RUN)
    with pytest.raises(UserCodeError, match=rf"runs.r.data.name: {name}:data raised while building one batch"):
        resolve_plan(plan)


def test_good_code_plans_as_before_and_built_in_runs_import_nothing(tmp_path, monkeypatch):
    plan, _ = plan_with(tmp_path, monkeypatch, GOOD, GPU_RUN)
    resolved = resolve_plan(plan)
    assert resolved.strategy == "ddp" and resolved.memory_estimate["reason"].startswith("DDP needs")
    assert not needs_check(plan_all({"runs": {"b": {"processes": 2}}}, env=ENV)["b"])


def test_only_the_meta_devices_own_limit_falls_back_to_ddp(tmp_path, monkeypatch):
    """A forward pass that reads a value off a tensor (.item()) cannot run on the meta device: the
    estimate falls back and says why; the plan goes on."""
    source = GOOD + """

class Thresholded(nn.Linear):
    def forward(self, x):
        return super().forward(x) * float(x.abs().max().item() > 0)


def thresholded(meta, cfg):
    return Thresholded(meta["shape"][0], meta["classes"])
"""
    plan, name = plan_with(tmp_path, monkeypatch, source, {**GPU_RUN, "model": {"name": "mylab:thresholded"}})
    resolved = resolve_plan(plan)
    assert resolved.strategy == "ddp" and "the meta device's limit" in resolved.memory_estimate["reason"]


def test_a_script_that_does_not_compile_is_refused(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("def main(:\n    pass\n")
    plan = plan_all({"runs": {"s": {"processes": 2, "train": {"script": str(script)}}}}, env=ENV)["s"]
    with pytest.raises(UserCodeError, match=rf"runs.s.train.script: {script} does not compile at plan time"):
        resolve_plan(plan)
    # a script that is not there is the planner's refusal already, before any code is tried

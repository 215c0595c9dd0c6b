"""plan/estimate.py with users' own datasets: one real batch, of any structure, through the run's
own forward pass and loss on the meta device (no memory allocated, no GPU needed)."""
from airetrain.commands.resolve import resolve_plan
from airetrain.plan.planner import plan_all
from conftest import ENV
from user_code import write_ownlab

DECODER = {"gpus": 3, "precision": "bf16", "batch": {"global": 96, "per_device": 32},
           "model": {"name": "ownlab.lab:decoder"}, "data": {"name": "ownlab.lab:token_data"}}


def plan(run, monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(write_ownlab(tmp_path / "code")))
    return resolve_plan(plan_all({"runs": {"r": run}}, env=ENV)["r"])


def test_dict_batches_and_a_returned_loss_are_probed(monkeypatch, tmp_path):
    estimate = plan(DECODER, monkeypatch, tmp_path).memory_estimate
    assert estimate["decision"] == "ddp" and estimate["parameters"] > 10_000   # probed, not "could not"
    assert estimate["reason"].startswith("DDP needs")
    assert estimate["fsdp_units"] == 3   # the decoder's model.layers


def test_over_budget_the_users_model_goes_to_fsdp(monkeypatch, tmp_path):
    p = plan({**DECODER, "memory_budget_gb": 1e-6}, monkeypatch, tmp_path)
    assert p.strategy == "fsdp" and p.activation_checkpointing is True
    assert "over the 1e-06 GB budget" in p.memory_estimate["reason"]


def test_a_forced_fsdp_plan_says_how_it_shards(monkeypatch, tmp_path):
    estimate = plan({**DECODER, "strategy": "fsdp"}, monkeypatch, tmp_path).memory_estimate
    assert estimate["decision"] == "fsdp" and estimate["fsdp_units"] == 3
    assert estimate["reason"].startswith("strategy: fsdp (asked for)")

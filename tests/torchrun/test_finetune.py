"""Fine-tuning on real torchrun runs: from a run's promoted model.safetensors under DDP, from a plain
state dict under FSDP (non-strict, its missing and unexpected keys listed), a frozen prefix that ends
bit-identical to the weights it started from, and a strict mismatch refused with the keys named."""
import pytest
import torch

from conftest import BIN, final_state, launch_training, read_json, run

BASE = {"processes": 2, "precision": "fp32", "batch": {"global": 64, "per_device": 16},
        "train": {"epochs": 1, "log_every_steps": 10}}
FROZEN = ["0.", "2."]   # small_cnn's two convolutions: the classifier is trained


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A short pretraining run, promoted as the promote step does: its model.safetensors."""
    tmp = tmp_path_factory.mktemp("pretrain")
    out, _ = launch_training(tmp, {**BASE, "processes": 1, "train": {"epochs": 1, "log_every_steps": 10,
                                                                     "seed": 7}})
    run([str(BIN / "airetrain"), "promote", "--plan", str(out / "plan.json"), "--train", str(out / "train.json"),
         "--out", str(out / "checkpoint.json")])
    return read_json(out / "checkpoint.json")["weights"]


def frozen_kept_and_rest_trained(out, tmp_path, start: dict[str, torch.Tensor]) -> None:
    model = {k.removeprefix("model."): v for k, v in final_state(out, tmp_path).items() if k.startswith("model.")}
    frozen = [k for k in model if k.startswith(tuple(FROZEN))]
    assert len(frozen) == 4 and all(torch.equal(model[k], start[k]) for k in frozen)
    assert not torch.equal(model["9.weight"], start["9.weight"])   # the classifier trained


def test_a_ddp_fine_tune_starts_from_a_promoted_safetensors_and_keeps_its_frozen_prefix(tmp_path, pretrained):
    from safetensors.torch import load_file

    cfg = {**BASE, "model": {"init_from": pretrained["path"], "freeze": FROZEN}}
    out, proc = launch_training(tmp_path, cfg)
    train = read_json(out / "train.json")
    assert train["init"] == {"source": pretrained["path"], "sha256": pretrained["sha256"], "missing": [],
                             "unexpected": []}
    assert train["parameters"] == {"trainable": 128 * 1024 + 128 + 10 * 128 + 10,
                                   "frozen": 32 * 9 + 32 + 64 * 32 * 9 + 64}
    assert f"initialised from {pretrained['path']}" in proc.stdout
    frozen_kept_and_rest_trained(out, tmp_path, load_file(pretrained["path"]))
    state = final_state(out, tmp_path)
    optimized = {".".join(k.split(".")[2:4]) for k in state if k.startswith("optimizer.state.")}
    assert optimized == {"6.weight", "6.bias", "9.weight", "9.bias"}   # no optimizer state for the frozen


def test_an_fsdp_fine_tune_from_a_plain_state_dict_lists_what_did_not_fit_and_strict_refuses_it(tmp_path,
                                                                                              pretrained):
    from safetensors.torch import load_file

    start = load_file(pretrained["path"])
    partial = {k: v for k, v in start.items() if not k.startswith("9.")} | {"extra.weight": torch.zeros(3)}
    torch.save(partial, tmp_path / "backbone.pt")
    cfg = {**BASE, "strategy": "fsdp",
           "model": {"init_from": str(tmp_path / "backbone.pt"), "init_strict": False, "freeze": FROZEN}}
    out, proc = launch_training(tmp_path / "loose", cfg)
    init = read_json(out / "train.json")["init"]
    assert (init["missing"], init["unexpected"]) == (["9.bias", "9.weight"], ["extra.weight"])
    assert "missing, kept as built: 9.bias, 9.weight; unexpected, ignored: extra.weight" in proc.stdout
    frozen_kept_and_rest_trained(out, tmp_path, start)

    strict = {**cfg, "model": {**cfg["model"], "init_strict": True}}
    out, proc = launch_training(tmp_path / "strict", strict, check=False)
    assert proc.returncode != 0 and not (out / "train.json").exists()
    assert (f"model.init_from: {tmp_path / 'backbone.pt'} does not fit the model (model.init_strict: true): "
            "missing 9.bias, 9.weight; unexpected extra.weight") in proc.stdout + proc.stderr

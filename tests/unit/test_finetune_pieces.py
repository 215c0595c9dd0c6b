"""Fine-tuning's pieces: freezing by prefix, reading weights in every format, matching them to the
model, where a run's init_from points, and the refusals before anything is submitted."""
import pytest
import torch
from torch import nn

from airetrain.checkpoint import store
from airetrain.errors import ConfigError
from airetrain.rundir.fingerprints import fingerprint
from airetrain.plan import config, refusals
from airetrain.train.finetune import freeze, match, read_weights, source_path


def model():
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def test_freeze_stops_the_gradients_of_a_prefix_and_counts_and_names_a_prefix_that_matches_nothing():
    m = model()
    assert freeze(m, ["0."]) == {"trainable": 18, "frozen": 40}
    assert [n for n, p in m.named_parameters() if not p.requires_grad] == ["0.weight", "0.bias"]
    with pytest.raises(ValueError, match=r"model.freeze: 'backbone.' matches no parameter; the model's parameters "
                                         r"begin: 0.weight, 0.bias, 2.weight, 2.bias"):
        freeze(model(), ["backbone."])


def test_weights_are_read_from_safetensors_a_plain_or_ddp_state_dict_and_an_airetrain_checkpoint(tmp_path):
    from safetensors.torch import save_file

    state = model().state_dict()
    save_file(state, tmp_path / "w.safetensors")
    torch.save(state, tmp_path / "plain.pt")
    torch.save({f"module.{k}": v for k, v in state.items()}, tmp_path / "ddp.pt")
    entry = store.write_file({"model": state, "optimizer": {}, "trainer": {"step": 1, "epoch": 0}}, tmp_path, 1, "f")
    for path in (tmp_path / "w.safetensors", tmp_path / "plain.pt", tmp_path / "ddp.pt", entry["path"]):
        loaded = read_weights(__import__("pathlib").Path(path))
        assert loaded.keys() == state.keys() and all(torch.equal(loaded[k], state[k]) for k in state), path
    torch.save([1, 2], tmp_path / "list.pt")
    with pytest.raises(ValueError, match="holds a list, not a state dict"):
        read_weights(tmp_path / "list.pt")


def test_matching_refuses_a_shape_always_and_missing_or_unexpected_keys_when_strict(tmp_path):
    shapes = {k: v.shape for k, v in model().state_dict().items()}
    head = {k: v for k, v in model().state_dict().items() if not k.startswith("2.")}
    loaded = {**head, "extra.weight": torch.zeros(3)}
    assert match(shapes, loaded, False, tmp_path) == {"missing": ["2.bias", "2.weight"],
                                                      "unexpected": ["extra.weight"]}
    with pytest.raises(ValueError, match=r"missing 2.bias, 2.weight; unexpected extra.weight; set "
                                         r"model.init_strict: false"):
        match(shapes, loaded, True, tmp_path)
    with pytest.raises(ValueError, match=r"model.init_from: 0.weight has shape \(8, 5\) in .*, \(8, 4\) in the model"):
        match(shapes, {**head, "0.weight": torch.zeros(8, 5)}, False, tmp_path)


def test_another_runs_weights_are_its_best_where_it_has_one(tmp_path):
    weights = tmp_path / "airetrain" / "pre" / "checkpoints"
    weights.mkdir(parents=True)
    assert source_path({"run": "pre"}, tmp_path) == weights / "model.safetensors"   # no best yet
    (weights / "best.safetensors").write_bytes(b"x")
    assert source_path({"run": "pre"}, tmp_path) == weights / "best.safetensors"
    assert source_path({"run": "pre", "which": "last"}, tmp_path) == weights / "model.safetensors"
    assert source_path(None, tmp_path) is None


def test_init_from_another_run_is_checked_for_its_name_and_for_cycles():
    with pytest.raises(ConfigError, match=r"runs.ft.model.init_from.run: 'pre' is not a run of this config; its "
                                          r"runs: ft, pretrain"):
        config.resolve({"runs": {"pretrain": {}, "ft": {"model": {"init_from": {"run": "pre"}}}}})
    with pytest.raises(ConfigError, match=r"runs.a.model.init_from: the runs start from each other in a cycle: "
                                          r"a -> b -> a"):
        config.resolve({"runs": {"a": {"model": {"init_from": {"run": "b"}}},
                                 "b": {"model": {"init_from": {"run": "a"}}}}})
    with pytest.raises(ConfigError, match=r"in a cycle: s -> s"):
        config.resolve({"runs": {"s": {"model": {"init_from": {"run": "s"}}}}})
    with pytest.raises(ConfigError, match=r"runs.f.model.init_from.which = 'first' is not allowed"):
        config.resolve({"runs": {"p": {}, "f": {"model": {"init_from": {"run": "p", "which": "first"}}}}})


def test_a_path_that_does_not_exist_is_refused_at_plan_time(tmp_path):
    _, runs = config.resolve({"runs": {"f": {"model": {"init_from": str(tmp_path / "nope.safetensors")}}}})
    problems = []
    refusals.trainer("f", runs["f"], "cpu", problems)
    assert problems == [f"runs.f.model.init_from: {tmp_path}/nope.safetensors does not exist (a path relative to "
                        f"{__import__('pathlib').Path.cwd()}, or absolute)"]


def test_the_start_weights_are_part_of_the_fingerprint():
    _, runs = config.resolve({"runs": {"a": {}}})
    assert fingerprint(runs["a"]) == fingerprint(runs["a"], None)
    prints = {fingerprint(runs["a"]), fingerprint(runs["a"], "ab"), fingerprint(runs["a"], "cd")}
    assert len(prints) == 3


def test_a_run_with_a_sweep_of_its_own_expands_alone_beside_the_top_level_grid():
    _, runs = config.resolve({"sweep": {"train.seed": [0, 1]}, "runs": {
        "pre": {}, "ft": {"model": {"init_from": {"run": "pre-seed0"}}, "sweep": {"optim.lr": ["1e-3", "3e-4"]}}}})
    assert sorted(runs) == ["ft-seed0-lr1e-3", "ft-seed0-lr3e-4", "ft-seed1-lr1e-3", "ft-seed1-lr3e-4",
                            "pre-seed0", "pre-seed1"]
    assert runs["ft-seed1-lr3e-4"].optim.lr == 3e-4 and runs["ft-seed1-lr3e-4"].train.seed == 1
    with pytest.raises(ConfigError, match=r"runs.ft.sweep: unknown key\(s\) 'optim.lrr'"):
        config.resolve({"runs": {"ft": {"sweep": {"optim.lrr": [1]}}}})
    with pytest.raises(ConfigError, match=r"runs.ft.sweep must map dotted run keys to lists of values"):
        config.resolve({"runs": {"ft": {"sweep": {"optim.lr": 1}}}})

"""Config validation: every wrong key names itself, where it is, and what is allowed."""
import pytest
import yaml

from airetrain.plan import config
from airetrain.errors import ConfigError

from conftest import REPO


def errors_of(cfg) -> str:
    with pytest.raises(ConfigError) as e:
        config.resolve(cfg)
    return str(e.value)


def test_embedded_default_is_valid_and_complete():
    top, runs = config.resolve(yaml.safe_load((REPO / "config/config.yaml").read_text()))
    run = runs["digits-ddp"]
    assert run.processes == 2 and run.gpus == 0
    assert run.optim.weight_decay == 0.01  # a schema default filled in
    assert top.site.gpus_per_node == 3


def test_unknown_key_names_key_place_and_allowed_keys():
    msg = errors_of({"runs": {"a": {"optim": {"lrr": 0.1}}}})
    assert "'lrr'" in msg and "runs.a.optim" in msg
    assert ("allowed keys: fused, grad_clip_norm, lr, momentum, name, no_decay_norm_bias, schedule, warmup_steps, "
            "weight_decay") in msg


def test_unknown_top_level_and_defaults_keys():
    msg = errors_of({"runs": {"a": {}}, "defaults": {"gpu": 1}, "sweeps": {}})
    assert "'gpu' (did you mean 'gpus'?) in defaults" in msg
    assert "'sweeps' (did you mean 'sweep'?) in (top level)" in msg


def test_a_typo_gets_the_nearest_key_value_or_run_name():
    """A near miss names what was probably meant, beside the whole list (as Snakemake and Hydra do)."""
    assert "unknown key 'lrr' (did you mean 'lr'?) in runs.a.optim; allowed keys: fused," in \
        errors_of({"runs": {"a": {"optim": {"lrr": 0.1}}}})
    assert "runs.a.precision = 'bf61' is not allowed (did you mean 'bf16'?)" in \
        errors_of({"runs": {"a": {"precision": "bf61"}}})
    assert "runs.a.model.name = 'small_cn' is not allowed (did you mean 'small_cnn'?)" in \
        errors_of({"runs": {"a": {"model": {"name": "small_cn"}}}})
    assert "sweep: unknown key(s) 'optim.lrr' (did you mean 'optim.lr'?)" in \
        errors_of({"runs": {"a": {}}, "sweep": {"optim.lrr": [1, 2]}})
    assert "'pretrian' is not a run of this config (did you mean 'pretrain'?); its runs: ft, pretrain" in \
        errors_of({"runs": {"pretrain": {}, "ft": {"model": {"init_from": {"run": "pretrian"}}}}})
    assert "'pretrian' is not another run of this config (did you mean 'pretrain'?)" in \
        errors_of({"runs": {"pretrain": {}, "ev": {"evaluate": {"run": "pretrian"}}}})
    from airetrain.restart import restart
    with pytest.raises(ConfigError, match=r"restart: unknown run 'digts' \(did you mean 'digits'\?\); runs: digits"):
        restart({"digits": None}, ["digts"], REPO / "results", confirm=lambda paths: False)
    far = errors_of({"runs": {"a": {"optim": {"zzzz": 0.1}}}})   # nothing near: no guess, the list alone
    assert "did you mean" not in far and "unknown key 'zzzz' in runs.a.optim; allowed keys:" in far


def test_wrong_value_lists_allowed_values():
    msg = errors_of({"runs": {"a": {"precision": "fp8"}}})
    assert "runs.a.precision = 'fp8'" in msg and "'bf16', 'fp16', 'fp32'" in msg


@pytest.mark.parametrize("name", ["a b", "x;rm -rf", "$(id)", "ok/../up"])
def test_run_names_with_shell_metacharacters_are_refused(name):
    assert "not allowed" in errors_of({"runs": {name: {}}})


def test_non_positive_sizes_are_refused():
    msg = errors_of({"runs": {"a": {"batch": {"global": 0}, "processes": 0, "optim": {"lr": 0}}}})
    assert "runs.a.batch.global = 0" in msg
    assert "runs.a.processes = 0" in msg
    assert "runs.a.optim.lr = 0" in msg


def test_runs_deep_merge_onto_defaults():
    _, runs = config.resolve({"defaults": {"optim": {"lr": 0.5}, "batch": {"global": 128}},
                              "runs": {"a": {"optim": {"name": "sgd"}}, "b": {"batch": {"global": 256}}}})
    assert runs["a"].optim.to_dict() == {"name": "sgd", "lr": 0.5, "weight_decay": 0.01, "momentum": 0.9,
                                     "schedule": "constant", "warmup_steps": 0, "grad_clip_norm": None, "fused": None,
                                     "no_decay_norm_bias": False}
    assert runs["a"].batch.global_ == 128 and runs["b"].batch.global_ == 256
    assert runs["b"].optim.name == "adamw"


def test_snakemake_validate_accepts_what_we_accept():
    from snakemake.utils import validate
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    validate(cfg, str(REPO / "airetrain/workflow/schemas/config.schema.yaml"))

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


def test_numbers_as_researchers_write_them_in_a_search_a_script_s_params_and_site():
    """YAML 1.1 reads 1e-4 as text: a search's ranges and choices, a script's own params: and their sweep,
    and site: facts take it as the number it means; text that is no number stays text."""
    raw = yaml.safe_load("""
site: {energy: {pue: 1e0}}
runs:
  a: {tune: {space: {optim.lr: {loguniform: [1e-4, 1e-1]}, params.wd: {choice: [3e-4, 1e-3, high]}}}}
  b: {params: {lr: 1e-3, name: big, nested: {decay: 5E-2}}, sweep: {params.eps: [1e-8, 1e-6]}}
""")
    assert raw["runs"]["b"]["params"]["lr"] == "1e-3"   # what YAML 1.1 makes of it
    settings, runs = config.resolve(raw)
    assert runs["a"].tune.space == {"optim.lr": {"loguniform": [1e-4, 0.1]},
                                    "params.wd": {"choice": [3e-4, 1e-3, "high"]}}
    assert runs["b-eps1e-8"].params == {"lr": 1e-3, "name": "big", "nested": {"decay": 0.05}, "eps": 1e-8}
    assert settings.site.energy.pue == 1.0


def test_a_choice_of_numbers_for_a_number_key_plans():
    _, runs = config.resolve({"runs": {"a": {"tune": {"space": {"optim.lr": {"choice": ["3e-4", "1e-3"]}}}}}})
    assert runs["a"].tune.space["optim.lr"]["choice"] == [3e-4, 1e-3]


def test_pruner_null_means_none_and_a_wrong_pruner_names_both():
    _, runs = config.resolve({"runs": {"a": {"tune": {"space": {"optim.lr": {"uniform": [0.1, 0.2]}}, "pruner": None}},
                                       "b": {"tune": {"space": {"optim.lr": {"uniform": [0.1, 0.2]}}}}}})
    assert runs["a"].tune.halving is None and runs["b"].tune.halving == {"min_epochs": 1, "reduction": 3}
    msg = errors_of({"runs": {"a": {"tune": {"space": {"optim.lr": {"uniform": [0.1, 0.2]}}, "pruner": "nope"}}}})
    assert "runs.a.tune.pruner = 'nope' is not allowed (did you mean 'none'?); allowed values: 'none', null" in msg
    assert "import path" not in msg


def test_a_number_where_text_belongs_says_to_quote_it():
    msg = errors_of({"runs": {"a": {"train": {"script": "t.py", "args": ["--epochs", 20]}}}})
    assert "runs.a.train.args.1 = 20 must be text: quote it: '20'" in msg


def test_every_schema_key_is_a_schema_and_every_description_is_whole():
    """A comma in a flow mapping (`{description: blocks (vit, gpt).}`) splits the description into bogus
    keys: every property is a schema, and every description ends a sentence with its brackets closed."""
    from airetrain.schema import load_schema

    def walk(node, where):
        if isinstance(node, list):
            for item in node:
                yield from walk(item, where)
        if not isinstance(node, dict):
            return
        for key, sub in (node.get("properties") or {}).items():
            assert isinstance(sub, dict), f"{where}.{key} is not a schema: {sub!r}"
        text = node.get("description")
        if isinstance(text, str):
            yield where, text
        for key, sub in node.items():
            yield from walk(sub, f"{where}.{key}")

    found = list(walk(load_schema(), "schema"))
    assert len(found) > 100
    for where, text in found:
        assert text.rstrip().endswith((".", ")")) and text.count("(") == text.count(")"), f"{where}: {text!r}"

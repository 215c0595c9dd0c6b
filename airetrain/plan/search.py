"""A tuned run (tune:) in the plan: its search refused where it cannot work, before anything is submitted.

The tuned run itself is planned as any run (its plan.json is what the study's steps read) but never
trains: its trials do, rung by rung, each rung a run of the parse (search_space.py names them), planned
when first looked up (planner.PlansWithTrials).
"""
from __future__ import annotations

import importlib.util

import jsonschema

from ..errors import ConfigError
from ..run_config import RunConfig, Settings
from ..schema import load_schema
from ..search_space import RUNG, TRIAL, parameters, slots
from ..text import did_you_mean
from . import sweep

FLOATS = ("loguniform", "uniform")
SCRIPT_KEYS = ("params.", "batch.")   # what a search may set for a script: its own values, the batch it is given


def refusals(name: str, run: RunConfig, settings: Settings, problems: list[str]) -> None:
    """tune: every key a leaf of the schema (or model.options.<key>) whose type fits its distribution, rungs
    that can be trained, a metric, and trials at once within the site's GPU cap."""
    tune, where = run.tune, f"runs.{name}.tune"
    if tune is None:
        return
    if importlib.util.find_spec("optuna") is None:   # the study runs on the submitting side: here
        problems.append(f"{where} needs the optuna package, which is not installed here: pip install 'airetrain[tune]'")
    params = []
    for key, spec in tune.space.items():   # each key's problem, not only the first
        try:
            params += parameters({key: spec}, where)
        except ConfigError as e:
            problems.append(str(e))
    schema = load_schema()
    for p in params:
        if problem := _fit(p, schema, f"{where}.space.{p.key}"):
            problems.append(problem)
    halving = tune.halving
    if halving and halving["reduction"] < 2:
        problems.append(f"{where}.pruner.successive_halving.reduction = {halving['reduction']}: it must be at least 2")
    if halving and halving["min_epochs"] > run.train.epochs:
        problems.append(f"{where}.pruner.successive_halving.min_epochs = {halving['min_epochs']} is above "
                        f"train.epochs = {run.train.epochs}: no trial would reach its first rung")
    if not (tune.metric or run.checkpoint.monitor):
        problems.append(f"{where}.metric: give the evaluation figure to tune on (checkpoint.monitor is null)")
    if tune.sampler_name != "tpe" and "n_startup_trials" in ((tune.sampler or {}).get(tune.sampler_name) or {}):
        problems.append(f"{where}.sampler.{tune.sampler_name}.n_startup_trials: only tpe has start-up trials")
    if tune.sampler_name == "grid" and any(p.kind in FLOATS for p in params):
        problems.append(f"{where}.sampler: grid needs every space key a choice or an int")
    if run.evaluate:
        problems.append(f"{where} and evaluate: an evaluation run trains nothing to tune; remove one of them")
    if run.train.script:
        for p in params:
            if not p.key.startswith(SCRIPT_KEYS):
                problems.append(f"{where}.space.{p.key}: a script does not read {p.key}; it reads its trial's values "
                                f"with job.params(): name it params.{p.key.rsplit('.', 1)[-1]}")
    site = settings.site
    parallel = slots(run, site.max_gpus_per_user)
    if run.gpus and parallel * run.gpus > site.max_gpus_per_user:
        problems.append(f"{where}.parallel = {parallel} trials x {run.gpus} GPUs = {parallel * run.gpus} GPUs, over "
                        f"site.max_gpus_per_user = {site.max_gpus_per_user}: at most "
                        f"{site.max_gpus_per_user // run.gpus} trials at once")


def _fit(p, schema: dict, at: str) -> str | None:
    """Why a parameter cannot set its key, or None: the key is a leaf of the run's schema (model.options.<key>:
    any) and each value the distribution can give is one the schema allows."""
    if p.key.startswith("model.options.") and p.key.count(".") == 2 or p.key.startswith("params.") \
            and p.key.count(".") == 1:   # the user's own names: any value
        return None
    node = sweep.run_key_schema(schema, p.key)
    if node is None or not _leaf(node) or p.key.split(".")[0] in ("tune", "evaluate", "tracking"):
        leaves = [k for k in sweep.run_keys(schema) if _leaf(sweep.run_key_schema(schema, k))]
        return (f"{at}: {p.key!r} is not a key a trial can set{did_you_mean(p.key, leaves)}; a space names dotted "
                "run keys such as optim.lr, optim.weight_decay, batch.per_device or model.options.<your key>")
    if p.kind == "choice":
        validator = jsonschema.Draft202012Validator({**node, "$defs": schema["$defs"]})
        bad = [v for v in p.choices if not validator.is_valid(v)]
        enum = [v for sub in (node, *node.get("anyOf", [])) for v in sub.get("enum", [])]
        allowed = f"; allowed values: {', '.join(map(repr, enum))}" if enum else ""
        return f"{at}.choice: {', '.join(map(repr, bad))} cannot be {p.key}{allowed}" if bad else None
    types = node.get("type", [])
    types = [types] if isinstance(types, str) else types
    if p.kind in FLOATS and "number" not in types:
        return (f"{at}: {p.kind} draws floats, but {p.key} is {' or '.join(types) or 'not a number'}"
                + ("; use {int: [low, high]}" if "integer" in types else ""))
    if p.kind == "int" and not {"integer", "number"} & set(types):
        return f"{at}: int draws integers, but {p.key} is {' or '.join(types) or 'not a number'}"
    low = node.get("minimum", node.get("exclusiveMinimum"))
    if low is not None and p.low < low:
        return f"{at}: the range starts at {p.low}, below {p.key}'s minimum of {low}"
    return None


def _leaf(node: dict) -> bool:
    types = node.get("type", [])
    return "properties" not in node and "object" not in ([types] if isinstance(types, str) else types)


def colliding_names(runs: dict[str, RunConfig]) -> list[str]:
    """Runs named as a tuned run's trials or rungs would be: refused, the two would share a folder."""
    tunes = {name for name, run in runs.items() if run.tune}
    out = []
    for name in runs:
        match = RUNG.match(name) or TRIAL.match(name)
        if match and match["tune"] in tunes:
            out.append(f"run {name!r} is named as a trial of the tuned run {match['tune']!r}: rename it")
    return out

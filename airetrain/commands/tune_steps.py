"""The tune's commands, which the workflow's rules run on the submitting side (local rules):

    airetrain tune-step  --plan results/<tune>/plan.json --settings-json ... --slot S --step K --out FILE
    airetrain tune-wave  --plan results/<tune>/plan.json --settings-json ... --group G --wave K --out FILE
    airetrain tune-table --plan results/<tune>/plan.json --out results/<tune>

A command, not a stage: a step plans the trial the study proposes (plan/search.py), so that a trial whose
plan is refused (a batch that does not divide, say) is failed in the study with the reason, not submitted.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import ConfigError


def _step(args) -> None:
    from ..search_space import step_path, tune_folder
    from ..tune.steps import decide

    tuned, results, refused, _ = _study_side(args)
    if Path(args.out).resolve() != step_path(tune_folder(tuned.run, results), args.slot, args.step).resolve():
        raise ConfigError(f"--out {args.out} is not the file of step {args.step} of slot {args.slot}")
    print(json.dumps(decide(tuned, args.slot, args.step, results, refused)))


def _wave(args) -> None:
    from ..plan.packing import search_groups
    from ..search_space import tune_folder, wave_path
    from ..tune.steps import decide_wave

    tuned, results, refused, settings = _study_side(args)
    if Path(args.out).resolve() != wave_path(tune_folder(tuned.run, results), args.group, args.wave).resolve():
        raise ConfigError(f"--out {args.out} is not the file of wave {args.wave} of group {args.group}")
    group = search_groups(tuned, settings.site)[args.group]
    print(json.dumps(decide_wave(tuned, args.group, group, args.wave, results, refused)))


def _study_side(args):
    """(the tuned run's plan, the results folder, refused(trial, params): why the trial's plan is refused, or None,
    the workflow's settings)."""
    from ..plan.planner import plan_rung
    from ..records import Plan, read_record
    from ..run_config import Settings
    from ..search_space import ladder, parse_trial

    tuned = read_record(args.plan, Plan)
    settings = Settings.from_dict(json.loads(args.settings_json))
    results = Path(args.plan).parents[1]

    def refused(name: str, params: dict) -> str | None:
        try:
            plan_rung(tuned, parse_trial(name)[1], ladder(tuned.config)[0], settings, results)
        except ConfigError as e:
            return str(e)
        return None

    return tuned, results, refused, settings


def _table(args) -> None:
    from ..records import Plan, read_record
    from ..tune.table import write_table

    tuned = read_record(args.plan, Plan)
    about = write_table(tuned, Path(args.out), Path(args.plan).parents[1])
    best = about["best"]
    print(f"tune {tuned.run}: " + (f"best trial {best['trial']} ({best['run']}), "
                                   f"{about['metric']} = {best['value']:.6g}" if best else "no trial completed"))


def report_names(results: str | Path, names: list[str]) -> list[str]:
    """The results folders a report covers: a tuned run (results/<tune>/tune.csv) stands for the last rung each
    of its trials trained, a row per trial."""
    import csv

    from ..search_space import rung_name

    out = []
    for name in names:
        table = Path(results) / name / "tune.csv"
        if not table.exists():
            out.append(name)
            continue
        with open(table) as f:
            out += [rung_name(row["run"], row["epochs"]) for row in csv.DictReader(f)
                    if row["run"] and int(row["epochs"])]
    return out


def status_names(plans: dict, results: str | Path = "results") -> tuple[list[str], list[str]]:
    """(the names `airetrain status` shows: a tuned run's trials by the newest rung each has begun, every other
    run by its own name; a line per tuned run on its search: trials done, pruned and running, the best so far)."""
    from ..search_space import parse_rung, rung_name
    from ..tune.table import rows, summary

    names, lines = [], []
    for name, plan in plans.items():
        if plan.config.tune is None:
            names.append(name)
            continue
        table = rows(plan, results)
        for row in table:
            begun = [parse_rung(p.name, {name}) for p in Path(results).glob(f"{row['run']}-e*")]
            if begun := [rung[2] for rung in begun if rung]:
                names.append(rung_name(row["run"], max(begun)))
        states = [row["state"].split(" ")[0] for row in table]
        best = summary(table, plan, results)["best"] if table else None
        lines.append(f"tune {name}: {len(table)} of {plan.config.tune.trials} trials asked, "
                     + ", ".join(f"{states.count(s)} {s}" for s in ("complete", "pruned", "running", "failed"))
                     + (f"; best {best['value']:.6g} ({best['run']})" if best else ""))
    return names, lines


def add_parsers(sub) -> None:
    steps = (("tune-step", "tell the study a rung's result; ask for the next trial", "slot", "step", _step),
             ("tune-wave", "a packed search's wave: its group's slots step together", "group", "wave", _wave))
    for name, what, chain, index, func in steps:
        p = sub.add_parser(name, help=f"(the workflow's) {what}")
        p.add_argument("--plan", required=True, help="the tuned run's plan.json")
        p.add_argument("--settings-json", required=True, help="the config's roots and site, as JSON")
        p.add_argument(f"--{chain}", type=int, required=True)
        p.add_argument(f"--{index}", type=int, required=True)
        p.add_argument("--out", required=True, help=f"its file (results/<tune>/tune/{chain}<N>/{index}<K>.json)")
        p.set_defaults(func=func)
    p = sub.add_parser("tune-table", help="(the workflow's) the search's table and its best trial's weights")
    p.add_argument("--plan", required=True, help="the tuned run's plan.json")
    p.add_argument("--out", required=True, help="the folder of tune.csv, tune.md and tune.html")
    p.set_defaults(func=_table)

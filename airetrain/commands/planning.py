"""`airetrain plan` (with --forecast) and `airetrain sbatch`: a config's plans, read as Snakemake reads it."""
from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from .config_options import config_arguments, load_config, load_plans
from .resolve import resolve_plan


def _forecast(args, plans: dict) -> None:
    import json
    from datetime import datetime

    from ..plan import config as cfg
    from ..plan.forecast import format_forecast
    from ..plan.planner import forecast_run
    from ..roots import Root

    settings, runs = cfg.resolve(load_config(args, args.right_size))
    at = datetime.now().astimezone()
    forecasts = {}
    for name, run in runs.items():
        roots = plans[name].roots
        forecasts[name] = forecast_run(name, run, settings, Root(roots.scratch, roots.scratch_source))
    if args.json:
        print(json.dumps({"at": at.isoformat(timespec="seconds"), "runs": forecasts}, indent=1))
        return
    for name, rows in forecasts.items():
        print(format_forecast(name, rows, at))
        kept = plans[name].forecast
        if kept and (Path("results") / name / "plan.json").exists():   # planned before: its layout stands
            print(f"run {name} keeps {kept['chosen_gpus']} GPUs, chosen at {kept['at']} (results/{name}/plan.json); "
                  "remove that file to choose again")
        print()


def _plan(args) -> None:
    from ..plan.overview import format_table

    if args.profile:   # its account reaches every job: a placeholder is refused here, as in the workflow
        from ..profiles import account_of
        account_of(args.profile)
    loaded = load_plans(args, args.right_size)
    plans = {name: resolve_plan(plan) for name, plan in loaded.items()}
    if args.forecast:
        _forecast(args, plans)
        if args.json:
            return
    elif args.json:
        raise ConfigError("--json prints the forecast as data: give it with --forecast")
    print(format_table(plans, loaded.settings.site))
    if args.write:
        from ..records import Plan, write_record
        for name, plan in plans.items():
            write_record(Path(args.write) / name / "plan.json", Plan, plan)


def _sbatch(args) -> None:
    from ..plan.sbatch import script

    plans = load_plans(args)
    if args.run not in plans:
        raise ConfigError(f"no run {args.run!r} in the config; runs: {', '.join(plans)}")
    if plans[args.run].config.tune:
        raise ConfigError(f"run {args.run!r} is a search (tune:): its trials are proposed as it goes, by the workflow")
    print(script(resolve_plan(plans[args.run]), args.workdir, Path(__file__).resolve().parents[2]), end="")


def add_parsers(sub) -> None:
    p = sub.add_parser("plan", help="validate a config and print every run's plan")
    config_arguments(p)
    p.add_argument("--write", metavar="DIR", help="also write DIR/<run>/plan.json")
    p.add_argument("--right-size", action="store_true",
                   help="resources: measured for every run: ask for what finished runs of the same profile used")
    p.add_argument("--forecast", action="store_true",
                   help="for each run's layouts (forecast.gpus, else its gpus): SLURM's predicted start "
                        "(sbatch --test-only; nothing is queued), the duration from history, the finish")
    p.add_argument("--json", action="store_true", help="with --forecast: the forecast as data")
    p.add_argument("--profile", metavar="DIR", help="also check the profile's account (e.g. profiles/aire)")
    p.set_defaults(func=_plan)

    p = sub.add_parser("sbatch", help="print a stand-alone sbatch script for one run (no Snakemake)")
    p.add_argument("run")
    config_arguments(p)
    p.add_argument("--workdir", default=".", help="where results/ go (default: here)")
    p.set_defaults(func=_sbatch)

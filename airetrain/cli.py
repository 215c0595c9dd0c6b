"""`airetrain`: plan, submit and watch a training pipeline; set up a project; read what the runs did."""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

# only what every command needs: each imports its own, so `airetrain report --jobs` starts in a few hundredths
# of a second
from .errors import ConfigError, NoSpaceError
from .commands import efficiency_report, node_check, site, submit, tune_steps
from .commands.config_options import config_arguments, load_config, load_plans
from .commands.resolve import resolve_plan


def _forecast(args, plans: dict) -> None:
    import json
    from datetime import datetime

    from .plan import config as cfg
    from .plan.forecast import format_forecast
    from .plan.planner import forecast_run
    from .roots import Root

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
    from .plan.overview import format_table

    if args.profile:   # its account reaches every job: a placeholder is refused here, as in the workflow
        from .profiles import account_of
        account_of(args.profile)
    plans = {name: resolve_plan(plan) for name, plan in load_plans(args, args.right_size).items()}
    if args.forecast:
        _forecast(args, plans)
        if args.json:
            return
    elif args.json:
        raise ConfigError("--json prints the forecast as data: give it with --forecast")
    print(format_table(plans))
    if args.write:
        from .records import Plan, write_record
        for name, plan in plans.items():
            write_record(Path(args.write) / name / "plan.json", Plan, plan)


def _resolve(args) -> None:
    import json

    from .records import Plan, write_record
    from .typed import from_dict

    plan = resolve_plan(from_dict(Plan, json.loads(args.plan_json), "--plan-json"))
    write_record(args.out, Plan, plan)
    print(f"run {plan.run}: strategy {plan.strategy}"
          + (f" ({plan.memory_estimate['reason']})" if plan.memory_estimate else ""))


def _sbatch(args) -> None:
    from .plan.sbatch import script

    plans = load_plans(args)
    if args.run not in plans:
        raise ConfigError(f"no run {args.run!r} in the config; runs: {', '.join(plans)}")
    if plans[args.run].config.tune:
        raise ConfigError(f"run {args.run!r} is a search (tune:): its trials are proposed as it goes, by the workflow")
    print(script(resolve_plan(plans[args.run]), args.workdir, Path(__file__).resolve().parents[1]), end="")


def _doctor(args) -> None:
    from .commands.doctor import report

    print("\n".join(report()))


def _prepare(args) -> None:
    from .stage.prepare import prepare
    print(prepare(args.dataset, args.dest))


def _pack(args) -> None:
    from .stage.transfer import StageError
    from .stage.pack import pack
    from .cluster.units import size_bytes

    try:
        pack(args.src, args.dest, size_bytes(args.shard_size, "--shard-size"), args.jobs,
             log=lambda line: print(line, flush=True))
    except StageError as e:
        raise ConfigError(str(e)) from None


def _stage(args) -> None:
    from .stage.staging import stage_run

    stage_run(args.plan, args.out, args.this_node)


def _launch(args) -> None:
    from .records import Plan, read_record
    from .train.launcher.launch import run

    plan = read_record(args.plan, Plan)
    if plan.script:   # the user's own script, run as it is
        from .train.launcher.script import run_script
        sys.exit(run_script(plan, args.stage, args.out))
    script_args = ["--plan", args.plan, "--stage", args.stage, "--out", args.out]
    code = run(plan, args.script, script_args, args.out)
    sys.exit(code)


def _promote(args) -> None:
    from .checkpoint.promote_step import promote_run

    print("\n".join(promote_run(args.plan, args.train, args.out, args.record, args.project_dir)))


def _history(args) -> None:
    import json

    from .rundir.history import everything, format_history

    plans = load_plans(args)
    roots = sorted({plan.roots.scratch for plan in plans.values()})
    lines = [line for root in roots for line in everything(root)]
    if args.run:
        lines = [line for line in lines if line["run"] in args.run]
    print(json.dumps(lines, indent=1) if args.json else format_history(lines))


def _status(args) -> None:
    import json
    import time

    from .report.status import format_status, status
    from .commands.submit import status_lines

    plans = load_plans(args)
    while True:
        runs, searches = tune_steps.status_names(plans, args.results)   # a search's trials as they appear
        rows = status(runs, args.results, args.logs)
        text = json.dumps(rows, indent=1, default=str) if args.json else \
            "\n".join([*status_lines(), format_status(rows), *searches])
        if not args.watch:
            print(text)
            return
        print(f"\033[H\033[2J{time.strftime('%H:%M:%S')}  (every {args.watch:g} s; Ctrl-C ends)\n{text}", flush=True)
        try:
            time.sleep(args.watch)
        except KeyboardInterrupt:
            return


def _restart(args) -> None:
    from .restart import asking, restart

    removed = restart(load_plans(args), args.runs, Path(args.results), asking(args.yes))
    print(f"removed {len(removed)} paths: the next invocation trains {', '.join(args.runs)} from step 0"
          if removed else "nothing removed")


def _sync(args) -> None:
    from .tracking.sync import sync

    sync(load_plans(args), args.runs, args.dry_run, args.timeout)


def _compare(args) -> None:
    from .report.compare import compare, format_compare

    found = compare(Path(args.results), args.names)
    print(__import__("json").dumps(found, indent=1, default=str) if args.json else format_compare(found))


def _init(args) -> None:
    from .project import init

    written = init(args.directory, args.script, args.gpus, args.account, args.partition)
    print("wrote " + ", ".join(str(p) for p in written))
    print(f"next: cd {args.directory} && airetrain plan && snakemake --cores 2")


class _Unbuilt:
    """The parser of a command that does not run this time: each call on it does nothing."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: self


class _OneCommand:
    """The subcommands, built only for the command that runs: argparse builds each parser in full, and two dozen
    of them cost more than folding a thousand jobs' accounting."""

    def __init__(self, sub, command: str | None):
        self.sub, self.command, self.found = sub, command, False

    def add_parser(self, name: str, **kwargs):
        if self.command is not None and name != self.command:
            return _Unbuilt()
        self.found = True
        if name in WORKFLOW_STEPS:   # callable, but not on the first screen: its help is its own --help
            kwargs["description"] = kwargs.pop("help", None)
        return self.sub.add_parser(name, **kwargs)


# The commands the workflow's rules and jobs run; `airetrain --help` names them in one line.
WORKFLOW_STEPS = ("resolve", "stage", "launch", "promote", "health", "health-node", "requeue-excluding", "tune-step",
                  "tune-table", "workflow-job")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: every command's, or only command's where it is one (else every one)."""
    parser = argparse.ArgumentParser(prog="airetrain", description=__doc__,
                                     epilog="The workflow's own steps, which its rules and jobs run: "
                                            f"{', '.join(WORKFLOW_STEPS)} (each has its --help).")
    sub = _OneCommand(parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands"),
                      command)

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

    p = sub.add_parser("init", help="write a project of your own that uses this workflow as a Snakemake module")
    p.add_argument("directory", nargs="?", default=".")
    p.add_argument("--script", help="the run trains with your own script (script mode), e.g. train.py")
    p.add_argument("--gpus", type=int, help="the run's GPUs (default: 0, CPU processes)")
    p.add_argument("--account", help="your SLURM account, for profiles/aire (else a placeholder to fill in)")
    p.add_argument("--partition", help="the runs' partition, whose facts SLURM gives for the config's site:")
    p.set_defaults(func=_init)

    p = sub.add_parser("workflow-path", help="where the installed workflow's files are (Snakefile, rules, profiles)")
    p.set_defaults(func=lambda args: print(__import__("airetrain.workflow").workflow.ROOT))

    p = sub.add_parser("resolve", help="decide a planned run's strategy (the memory estimate) and write plan.json")
    p.add_argument("--plan-json", required=True, help="the run's plan as the workflow made it, as JSON")
    p.add_argument("--out", required=True, help="plan.json")
    p.set_defaults(func=_resolve)

    p = sub.add_parser("sbatch", help="print a stand-alone sbatch script for one run (no Snakemake)")
    p.add_argument("run")
    config_arguments(p)
    p.add_argument("--workdir", default=".", help="where results/ go (default: here)")
    p.set_defaults(func=_sbatch)

    p = sub.add_parser("doctor", help="torch, CUDA, NCCL, GPUs and the variables that matter")
    p.set_defaults(func=_doctor)

    from .catalog import DATASETS
    written = {name: d for name, d in DATASETS.items() if d.writer}
    p = sub.add_parser("prepare", help="write a built-in dataset to a directory (what the workflow does for "
                                       "data.name: digits, shapes or shapes3d)")
    p.add_argument("--dataset", choices=list(written), default="digits",
                   help="; ".join(f"{name}: {d.about}" for name, d in written.items()))
    p.add_argument("dest")
    p.set_defaults(func=_prepare)

    p = sub.add_parser("pack", help="pack a directory tree into WebDataset tar shards with an index, for staging "
                                    "many-file datasets (resumable; the same files give the same shards)")
    p.add_argument("src", help="the directory to pack (e.g. $SCRATCH/imagenet)")
    p.add_argument("dest", help="where the shards and index.json go (e.g. $SCRATCH/imagenet-shards); "
                                "then data.path: DEST")
    p.add_argument("--shard-size", default="512MB", help="about this many bytes per shard (default 512MB)")
    p.add_argument("--jobs", type=int, default=None, help="shards written at once (default: the cores here)")
    p.set_defaults(func=_pack)

    p = sub.add_parser("stage", help="copy a run's dataset to the fast root, verified")
    p.add_argument("--plan", required=True)
    p.add_argument("--out", required=True, help="stage.json")
    p.add_argument("--this-node", action="store_true",
                   help="stage on this node only and write <out>.<host>.json (used by the multi-node stage)")
    p.set_defaults(func=_stage)

    p = sub.add_parser("launch", help="start torchrun for a run (a SLURM step inside a job)")
    p.add_argument("--plan", required=True)
    p.add_argument("--stage", required=True)
    p.add_argument("--out", required=True, help="directory for train.json and metrics.jsonl")
    p.add_argument("--script", required=True, help="the training script torchrun runs")
    p.set_defaults(func=_launch)

    p = sub.add_parser("promote", help="make the final checkpoint durable on the scratch root")
    p.add_argument("--plan", required=True)
    p.add_argument("--train", required=True, help="train.json")
    p.add_argument("--out", required=True, help="checkpoint.json")
    p.add_argument("--record", help="also write the run record (run.json) here")
    p.add_argument("--project-dir", default=".", help="the project's git checkout, for the run record")
    p.set_defaults(func=_promote)

    p = sub.add_parser("status", help="where every run is: planned, pending (why, expected start), staging, training "
                                      "(step, loss, ETA), stopped, done, failed (its last error line)")
    config_arguments(p)
    p.add_argument("--results", default="results")
    p.add_argument("--logs", default="logs")
    p.add_argument("--json", action="store_true", help="the same rows as JSON, for scripts")
    p.add_argument("--watch", type=float, metavar="SECONDS", help="redraw every SECONDS until Ctrl-C")
    p.set_defaults(func=_status)

    p = sub.add_parser("history", help="every finished run's profile and what it measured, one line per run and job")
    config_arguments(p)
    p.add_argument("--json", action="store_true", help="every line as JSON, its profile and figures in full")
    p.add_argument("run", nargs="*", help="only these runs")
    p.set_defaults(func=_history)

    p = sub.add_parser("restart", help="train runs again from step 0: remove their checkpoints, record, results")
    config_arguments(p)
    p.add_argument("--results", default="results")
    p.add_argument("--yes", action="store_true", help="do not ask")
    p.add_argument("runs", nargs="+")
    p.set_defaults(func=_restart)
    p = sub.add_parser("sync", help="upload the runs' offline W&B sessions not uploaded yet (on the login node)")
    config_arguments(p)
    p.add_argument("--dry-run", action="store_true", help="list what would be uploaded")
    p.add_argument("--timeout", type=float, default=1800, help="seconds one W&B run's upload may take")
    p.add_argument("runs", nargs="*", help="the runs (default: all)")
    p.set_defaults(func=_sync)

    p = sub.add_parser("compare", help="the config keys that differ between runs (or groups), and their figures")
    p.add_argument("--results", default="results")
    p.add_argument("--json", action="store_true")
    p.add_argument("names", nargs="+", metavar="RUN_OR_GROUP")
    p.set_defaults(func=_compare)

    efficiency_report.add_parsers(sub)
    tune_steps.add_parsers(sub)
    site.add_parsers(sub)
    node_check.add_parsers(sub)
    submit.add_parsers(sub)
    return parser if sub.found or command is None else build_parser()


def main(argv=None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), None)   # none: --help, or a mistake
    passed = []
    if command == "submit" and "--" in argv:   # what follows is Snakemake's own
        argv, passed = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    args = build_parser(command).parse_args(argv)
    if passed:
        args.snakemake_args = passed
    try:
        args.func(args)
    except ConfigError as e:
        print(f"airetrain: {e}", file=sys.stderr)
        sys.exit(2)
    except NoSpaceError as e:   # a full disk or quota: the message says which, and how much is needed
        print(f"airetrain: {e}", file=sys.stderr)
        sys.exit(1)

"""`airetrain status`, `history`, `restart`, `sync`, `compare`: what the runs are doing and did, and what
to do with them."""
from __future__ import annotations

from pathlib import Path

from . import tune_steps
from .config_options import config_arguments, load_plans


def _history(args) -> None:
    import json

    from ..rundir.history import everything, format_history

    plans = load_plans(args)
    roots = sorted({plan.roots.scratch for plan in plans.values()})
    lines = [line for root in roots for line in everything(root)]
    if args.run:
        lines = [line for line in lines if line["run"] in args.run]
    print(json.dumps(lines, indent=1) if args.json else format_history(lines))


def _status(args) -> None:
    import json
    import time

    from ..report.status import format_status, status
    from .submit import status_lines

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
    from ..restart import asking, restart

    removed = restart(load_plans(args), args.runs, Path(args.results), asking(args.yes))
    print(f"removed {len(removed)} paths: the next invocation trains {', '.join(args.runs)} from step 0"
          if removed else "nothing removed")


def _sync(args) -> None:
    from ..tracking.sync import sync

    sync(load_plans(args), args.runs, args.dry_run, args.timeout)


def _compare(args) -> None:
    from ..report.compare import compare, format_compare

    found = compare(Path(args.results), args.names)
    print(__import__("json").dumps(found, indent=1, default=str) if args.json else format_compare(found))


def add_parsers(sub) -> None:
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

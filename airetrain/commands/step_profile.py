"""`airetrain profile RUN [--results DIR]`: where a run's profiled steps spent their time (train.profile), as
profile.md says it, and where its traces are."""
from __future__ import annotations

import sys
from pathlib import Path


def _profile(args) -> None:
    from ..train.profiler import FOLDER

    folder = Path(args.results) / args.run / FOLDER
    summary = folder / "profile.md"
    if not summary.exists():
        print(f"airetrain: {summary} does not exist: set train.profile in run {args.run}'s config "
              "(docs/training.md), and train it", file=sys.stderr)
        sys.exit(1)
    print(summary.read_text(), end="")
    for trace in sorted(folder.glob("*.pt.trace.json")):
        print(f"trace: {trace}")


def add_parsers(sub) -> None:
    p = sub.add_parser("profile", help="where a run's profiled steps spent their time (train.profile): the top "
                                       "operators, communication against compute, the data wait")
    p.add_argument("run", help="the run's name")
    p.add_argument("--results", default="results", help="the results folder (default: results)")
    p.set_defaults(func=_profile)

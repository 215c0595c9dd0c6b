"""`airetrain report`: the efficiency table of runs (the pipeline's report rule), or of any SLURM jobs
(`--jobs`, `--since`): for those, the sacct call starts first, and the rest is imported while it runs."""
from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from .tune_steps import report_names


def _report(args) -> None:
    import json

    started = _report_jobs_query(args)   # sacct under way while the code that folds its answer is imported
    from ..report.render import efficiency_markdown, to_markdown, write_efficiency
    from ..report.collection import frame, jobs_rows, table

    energy = json.loads(args.energy_json) if args.energy_json else None   # the config's site.energy
    if started:
        rows, columns = jobs_rows(args.jobs, args.since, energy=energy, started=started, seff_checks=args.seff_check)
        if not args.out:   # printed only: no pandas to import
            print(efficiency_markdown(rows, columns).split("\n\nColumns")[0])
            return
        df, results = frame(rows, columns), None
    elif args.runs:
        args.runs = report_names(args.results, args.runs)
        df = table(args.results, args.runs, energy)
        results = args.results
        if args.out:   # the pipeline's report: the finished runs join their durable history
            from ..rundir.history import record
            from ..report.query import UNAVAILABLE
            # a run whose sacct figures are missing joins its history once accounting answers again
            added = record(Path(args.results), [row for row in df.to_dict("records")
                                                 if not str(row.get("status")).startswith(UNAVAILABLE)])
            print(f"history: {len(added)} new line{'s' if len(added) != 1 else ''} "
                  f"({', '.join(line['run'] for line in added) or 'every run was recorded already'})")
    else:
        raise ConfigError("name the runs (results/<run>), or give --jobs ID,ID or --since DATE")
    print(to_markdown(df).split("\n\nColumns")[0])
    if args.out:
        paths = write_efficiency(df, args.out, results)
        if results is not None:   # what the experiment found: a row per group of seeds (none yet: a header)
            from ..report.results_render import write_results
            paths.update(write_results(Path(args.results), args.runs, Path(args.out), df))
        print(f"wrote {', '.join(str(p) for p in paths.values())}")


def _report_jobs_query(args):
    """For --jobs/--since: the ids checked (args.jobs becomes their list) and the sacct call started."""
    if not (args.jobs or args.since):
        return None
    if args.runs:
        raise ConfigError("give run names, or --jobs/--since, not both")
    if args.seff_check < 0:
        raise ConfigError(f"--seff-check {args.seff_check}: give how many jobs seff checks, 0 or more")
    from ..report.query import Started

    args.jobs = [j for j in (args.jobs or "").split(",") if j]
    for job in args.jobs:
        if not job.replace("_", "").replace(".", "").isdigit():
            raise ConfigError(f"--jobs: {job!r} is not a SLURM job id (digits, or 123_4 for an array task)")
    return Started(args.jobs, args.since)


def add_parsers(sub) -> None:
    p = sub.add_parser("report", help="efficiency table of runs, or of any SLURM jobs (--jobs, --since)")
    p.add_argument("--results", default="results")
    p.add_argument("--out", help="also write efficiency.csv/.md/.html and the plots here, and for runs the "
                                 "results table (results.csv/.md/.html, results-runs.csv)")
    p.add_argument("--jobs", help="any SLURM jobs: ID,ID,... (one sacct call)")
    p.add_argument("--since", help="any SLURM jobs of yours started since DATE (sacct --starttime)")
    p.add_argument("--seff-check", type=int, default=0, metavar="N",
                   help="with --jobs/--since: check the first N jobs' figures against seff, where it is installed "
                        "(a process and a database query each; the pipeline's report checks its runs')")
    p.add_argument("--energy-json", help="site.energy's constants as JSON (default: the schema's)")
    p.add_argument("runs", nargs="*")
    p.set_defaults(func=_report)

"""The workflow's steps as commands (`airetrain resolve`, `prepare`, `pack`, `stage`, `launch`, `promote`):
what each rule runs (plan/step_commands.py), and `prepare` and `pack` for users too."""
from __future__ import annotations

import sys

from ..errors import ConfigError
from .resolve import resolve_plan


def _resolve(args) -> None:
    import json

    from ..records import Plan, write_record
    from ..typed import from_dict

    plan = resolve_plan(from_dict(Plan, json.loads(args.plan_json), "--plan-json"))
    write_record(args.out, Plan, plan)
    print(f"run {plan.run}: strategy {plan.strategy}"
          + (f" ({plan.memory_estimate['reason']})" if plan.memory_estimate else ""))


def _prepare(args) -> None:
    from ..stage.prepare import prepare
    print(prepare(args.dataset, args.dest))


def _pack(args) -> None:
    from ..stage.transfer import StageError
    from ..stage.pack import pack
    from ..cluster.units import size_bytes

    try:
        pack(args.src, args.dest, size_bytes(args.shard_size, "--shard-size"), args.jobs,
             log=lambda line: print(line, flush=True))
    except StageError as e:
        raise ConfigError(str(e)) from None


def _stage(args) -> None:
    from ..stage.staging import stage_run

    stage_run(args.plan, args.out, args.this_node)


def _launch(args) -> None:
    from ..records import Plan, read_record
    from ..train.launcher.launch import run

    plan = read_record(args.plan, Plan)
    if plan.script:   # the user's own script, run as it is
        from ..train.launcher.script import run_script
        sys.exit(run_script(plan, args.stage, args.out))
    script_args = ["--plan", args.plan, "--stage", args.stage, "--out", args.out]
    code = run(plan, args.script, script_args, args.out)
    sys.exit(code)


def _promote(args) -> None:
    from ..checkpoint.promote_step import promote_run

    print("\n".join(promote_run(args.plan, args.train, args.out, args.record, args.project_dir)))


def add_parsers(sub) -> None:
    from ..catalog import DATASETS

    written = {name: d for name, d in DATASETS.items() if d.writer}
    p = sub.add_parser("resolve", help="decide a planned run's strategy (the memory estimate) and write plan.json")
    p.add_argument("--plan-json", required=True, help="the run's plan as the workflow made it, as JSON")
    p.add_argument("--out", required=True, help="plan.json")
    p.set_defaults(func=_resolve)

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

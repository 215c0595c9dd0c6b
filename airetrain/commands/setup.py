"""`airetrain init`, `workflow-path`: a project of the user's own, and where the installed workflow is."""
from __future__ import annotations


def _init(args) -> None:
    from ..project import init

    written = init(args.directory, args.script, args.gpus, args.account, args.partition)
    print("wrote " + ", ".join(str(p) for p in written))
    print(f"next: cd {args.directory} && airetrain plan && snakemake --cores 2")


def add_parsers(sub) -> None:
    p = sub.add_parser("init", help="write a project of your own that uses this workflow as a Snakemake module")
    p.add_argument("directory", nargs="?", default=".")
    p.add_argument("--script", help="the run trains with your own script (script mode), e.g. train.py")
    p.add_argument("--gpus", type=int, help="the run's GPUs (default: 0, CPU processes)")
    p.add_argument("--account", help="your SLURM account, for profiles/aire (else a placeholder to fill in)")
    p.add_argument("--partition", help="the runs' partition, whose facts SLURM gives for the config's site:")
    p.set_defaults(func=_init)

    p = sub.add_parser("workflow-path", help="where the installed workflow's files are (Snakefile, rules, profiles)")
    p.set_defaults(func=lambda args: print(__import__("airetrain.workflow").workflow.ROOT))

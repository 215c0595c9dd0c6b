"""The config a command reads, read as Snakemake reads it from the same words (config/config.yaml, then
--configfile, then --config: plan/config.workflow_config), and the plans of it. Every command that takes a
config (plan, submit, sbatch, status, history, restart, sync) declares these options here."""
from __future__ import annotations


def load_config(args, right_size: bool = False) -> dict:
    """The config as Snakemake reads it from the same command line (plan.config.workflow_config)."""
    from ..plan.config import workflow_config
    from ..schema import deep_merge

    config = workflow_config(args.configfile, args.config, args.replace_workflow_config)
    if right_size:   # every run, also one that says resources: requested
        config = deep_merge(config, {"runs": {name: {"resources": "measured"} for name in config.get("runs") or {}}})
    return config


def config_arguments(p) -> None:
    """The options that choose the config, meaning what they mean to Snakemake."""
    p.add_argument("--configfile", nargs="+", default=[], metavar="FILE",
                   help="files merged over the Snakefile's configfile: (config/config.yaml), in order, as "
                        "snakemake --configfile merges them")
    p.add_argument("--config", nargs="+", default=[], metavar="KEY=VALUE", help="values over those, as snakemake's")
    p.add_argument("--replace-workflow-config", action="store_true",
                   help="the command line's config replaces config/config.yaml instead of updating it")


def load_plans(args, right_size: bool = False) -> dict:
    from ..plan.planner import plan_all

    # right-sized runs keep what they were planned with, and forecast-chosen runs their layout
    return plan_all(load_config(args, right_size), results="results")

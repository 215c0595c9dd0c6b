"""`airetrain site [--partition P] [--qos Q] [--write FILE]`: the site's facts, read from SLURM (site_facts.py),
printed as the `site:` section of a config, with what could not be found; --write puts them in a config
file of their own, merged over the project's config (snakemake --configfile FILE)."""
from __future__ import annotations

import sys


def _site(args) -> None:
    import yaml

    from ..cluster.site_facts import fast_root_note, read_site

    site, missing, partition, sources = read_site(args.partition, args.qos)
    if not site:
        print(f"airetrain: {missing[0]}", file=sys.stderr)
        sys.exit(1)
    text = yaml.safe_dump({"site": site}, sort_keys=False)
    print(f"# partition {partition}, read from SLURM\n{text}", end="")
    for key, where in sources.items():
        print(f"# {key}: {where}")
    if fast := fast_root_note():
        print(f"# the fast root: {fast}")
    for line in missing:
        print(f"# not found: {line}")
    if args.write:
        with open(args.write, "w") as f:
            f.write(f"# airetrain site --partition {partition}: the site's facts as SLURM gave them\n{text}")
        print(f"# wrote {args.write}")


def add_parsers(sub) -> None:
    p = sub.add_parser("site", help="read the site's facts from SLURM (GPUs and their type, cores, memory, time "
                                    "limit, the GPU cap) and print them as a config's site: section")
    p.add_argument("--partition", help="the partition (default: SLURM's default partition)")
    p.add_argument("--qos", help="the QoS whose per-user GPU cap to read (default: your default QoS)")
    p.add_argument("--write", metavar="FILE", help="also write them to FILE, a config file of their own")
    p.set_defaults(func=_site)

"""The plan of every run as one table, printed by the workflow and by `airetrain plan`."""
from __future__ import annotations

from ..environment import gives_batch
from ..records import Plan
from ..run_config import Site
from ..rundir.batch_changes import changes, with_changes
from ..rundir.memory_raises import raises
from ..text import aligned
from .packing import packs, search_groups


def format_table(plans: dict[str, Plan], site: Site | None = None) -> str:
    """One line per run: what it asks for and how its batch is made; with the site, the runs that share an
    allocation (pack)."""
    header = ["run", "device", "world", "nodes", "ranks/node", "gres", "cores/node", "mem/node",
              "time", "global = per_device x world x accum", "strategy", "precision"]
    rows = []
    for name, p in plans.items():
        rows.append([
            name, p.device, str(p.world_size), str(p.nodes), str(p.nproc_per_node), p.slurm.gres or "-",
            str(p.cpus_per_node), f"{p.mem_gb_per_node:g}G", f"{p.time_min.total}m",
            _batch(p), p.strategy, "-" if p.script else p.precision,
        ])
    measured = [f"{name}: resources measured, from {p.right_sized['from']}: " + "; ".join(
        f"{key} {_value(req['value'])} ({req['how']})" for key, req in p.right_sized.items()
        if isinstance(req, dict)) for name, p in plans.items() if p.right_sized]
    raised = [f"{name}: asks for {r[-1]['mem_mb'] / 1024:g}G a node, not {p.mem_gb_per_node:g}G: job {r[-1]['job']} "
              "ran out of host memory (retry.oom)" for name, p in plans.items() if (r := raises(p.durable_dir))]
    changed = [f"{name}: trains with per_device {b.per_device} x accumulation {b.grad_accum}: out of GPU memory at "
               f"step {c[-1]['step']}" for name, p in plans.items()
               if (c := changes(p.durable_dir)) and (b := with_changes(p).batch) != p.batch]
    packed = [f"{', '.join(members)}: one allocation ({name}), {sum(plans[m].gpus for m in members)} GPUs, each run "
              "a step with its own" for name, members in (packs(plans, site) if site else {}).items()]
    return "\n".join([*aligned([header, *rows], rule=True), *measured, *raised, *changed, *packed,
                      *(_waves(plans, site) if site else [])])


def _waves(plans: dict[str, Plan], site: Site) -> list[str]:
    """A line for each search whose trials' rungs share allocations (a search in waves)."""
    out = []
    for name, p in plans.items():
        if p.config.tune and len((groups := search_groups(p, site))[0]) > 1:
            out.append(f"{name}: its {sum(map(len, groups))} trials at once in waves of {len(groups[0])}, each wave's "
                       f"rungs one allocation ({len(groups[0]) * p.gpus} GPUs), each rung a step with its own")
    return out


def _batch(p: Plan) -> str:
    """How the batch is made; a script not given the batch (environment.gives_batch) chooses its own."""
    b = p.batch
    if p.script and not gives_batch(p.config.train.args):
        return "the script's own"
    return f"{b.global_} = {b.per_device} x {p.world_size} x {b.grad_accum}"


def _value(value) -> str:
    return " ".join(f"{k} {v}" for k, v in value.items()) if isinstance(value, dict) else f"{value:g}"

"""Which runs share one SLURM allocation (the run key pack): decided from the plans alone, so that the
submit host and every job's parse find the same packs.

A run may be packed when it needs one node or less, at least one GPU and fewer than a node's, and is
ready with the others: not a search's trial (its rungs are asked for one by one) and not a run that
starts from another run's weights (it waits for that run). Runs are packed in the config's order with
the runs that ask SLURM for the same partition, account, QoS, time limit and options and read the same
dataset (staged once for them all), while the node's GPUs, cores and memory hold them; pack N caps a pack
at N runs. A pack of one is an ordinary run.

A search's trials are asked for one by one, so they are never ready together in the plan: a search that
packs (wave_size) goes in waves instead. Its slots are split into groups of what one allocation holds; the
slots of a group take each step together, and the rungs of that step train side by side in one allocation.
"""
from __future__ import annotations

from ..records import Plan
from ..run_config import Site
from ..search_space import slots

PACK_PREFIX = "pack-"


def packable(plan: Plan, site: Site) -> bool:
    return _part_of_a_node(plan, site) and not plan.config.model.init_from and plan.tune_keys is None


def _part_of_a_node(plan: Plan, site: Site) -> bool:
    return (plan.config.pack != "none" and plan.nodes == 1 and 0 < plan.gpus < site.gpus_per_node
            and plan.evaluates is None)


def wave_size(tuned: Plan, slots: int, site: Site) -> int:
    """How many of a search's slots take their steps together, their rungs in one allocation: what a node holds
    of its trials (GPUs, cores, memory), at most pack N and the slots; 1 where it does not pack."""
    if not _part_of_a_node(tuned, site) or slots < 2:
        return 1
    cap = tuned.config.pack if isinstance(tuned.config.pack, int) else slots
    return max(1, min(slots, cap, site.gpus_per_node // tuned.gpus, site.cores_per_node // tuned.cpus_per_node,
                      site.mem_gb_per_node * 1024 // tuned.slurm.mem_mb))


def slot_groups(count: int, size: int) -> list[range]:
    """The groups of count slots that step together: consecutive slots, size at a time."""
    return [range(first, min(count, first + size)) for first in range(0, count, size)]


def search_groups(tuned: Plan, site: Site) -> list[range]:
    """A search's slots in the groups that step together; groups of one where it does not pack."""
    count = slots(tuned.config, site.max_gpus_per_user)
    return slot_groups(count, wave_size(tuned, count, site))


def _together(plan: Plan) -> tuple:
    """What the runs of one allocation must share: its request to SLURM, and the staged dataset."""
    s = plan.slurm
    return s.partition, s.account, s.qos, s.extra, plan.time_min.total, str(plan.dataset)


def packs(plans: dict[str, Plan], site: Site) -> dict[str, tuple[str, ...]]:
    """{pack name: its runs, in the config's order}, for the packs of two runs or more. A pack is named
    after its first run."""
    open_packs: dict[tuple, list[list[str]]] = {}
    for name, plan in plans.items():
        if not packable(plan, site):
            continue
        candidates = open_packs.setdefault(_together(plan), [])
        if not candidates or not _fits(candidates[-1], plan, plans, site):
            candidates.append([])
        candidates[-1].append(name)
    return {f"{PACK_PREFIX}{members[0]}": tuple(members) for groups in open_packs.values() for members in groups
            if len(members) > 1}


def _fits(members: list[str], plan: Plan, plans: dict[str, Plan], site: Site) -> bool:
    together = [plans[m] for m in members] + [plan]
    caps = [p.config.pack for p in together if isinstance(p.config.pack, int)]
    return (sum(p.gpus for p in together) <= site.gpus_per_node
            and len(together) * max(p.cpus_per_node for p in together) <= site.cores_per_node
            and sum(p.slurm.mem_mb for p in together) <= site.mem_gb_per_node * 1024
            and (not caps or len(together) <= min(caps)))


def pack_request(members: list[Plan]) -> dict:
    """The allocation of a pack: one node, a task per run, the runs' GPUs, cores and memory together."""
    return {"nodes": 1, "tasks": len(members), "cpus_per_task": max(p.cpus_per_node for p in members),
            "gpus": sum(p.gpus for p in members), "mem_mb": sum(p.slurm.mem_mb for p in members),
            "minutes": max(p.time_min.total for p in members)}

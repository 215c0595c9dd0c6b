"""The layout arithmetic of a run: GPUs to nodes and ranks, the batch to gradient accumulation, and the
cores and memory of each node. Each function appends to `problems` what makes the request impossible,
with the key and the values that would work.
"""
from __future__ import annotations

import math

from ..records import BatchPlan
from ..run_config import RunConfig, Site

# Per-rank defaults on CPU. With GPUs, each rank's default is its GPU's share of the site's node (gpu_share).
DEFAULT_CPUS_PER_RANK = {"cpu": 1}
DEFAULT_MEM_GB_PER_RANK = {"cpu": 2}
MEM_STEP_GB = 5   # a GPU's share of the memory is rounded down to this: the node's system keeps some


def gpu_share(site: Site) -> tuple[int, float]:
    """(cores, memory GB) of one GPU's share of a node, from the site's facts: on Aire 24 cores and 250 GB over
    3 GPUs give 8 cores and 80 GB; a node of 4 GPUs, 24 cores and 250 GB gives 6 and 60."""
    cores = max(1, site.cores_per_node // site.gpus_per_node)
    mem = site.mem_gb_per_node / site.gpus_per_node
    return cores, max(1, math.floor(mem / MEM_STEP_GB) * MEM_STEP_GB if mem >= MEM_STEP_GB else math.floor(mem))


def nodes_and_ranks(name: str, run: RunConfig, site: Site, problems: list[str]) -> tuple[int, int]:
    """(nodes, ranks per node) for the run."""
    gpus, per_node = run.gpus, site.gpus_per_node
    if gpus == 0:
        return _cpu_layout(name, run, problems)
    if gpus <= per_node:
        nodes = 1
    elif gpus % per_node:
        lower, upper = gpus // per_node * per_node, math.ceil(gpus / per_node) * per_node
        problems.append(
            f"runs.{name}.gpus = {gpus} is impossible: a node has {per_node} GPUs, so more than {per_node} "
            f"must be whole nodes (gres gpu:{gpus} on one node does not exist); ask for gpus: {lower} or {upper}"
        )
        return 1, per_node
    else:
        nodes = gpus // per_node
    nproc = gpus // nodes
    if run.nodes is not None and run.nodes != nodes:
        if run.nodes * per_node < gpus:
            why = f"{gpus} GPUs do not fit on {run.nodes} node(s) of {per_node} GPUs"
        else:
            why = f"{gpus} GPUs take {nodes} node(s) with {nproc} GPUs each"
        problems.append(f"runs.{name}.nodes = {run.nodes} is impossible: {why}; set nodes: {nodes} or remove it")
    if run.nproc_per_node is not None and run.nproc_per_node != nproc:
        problems.append(
            f"runs.{name}.nproc_per_node = {run.nproc_per_node} differs from the {nproc} GPUs per node: "
            f"each GPU needs exactly one process; set nproc_per_node: {nproc} or remove it"
        )
    return nodes, nproc


def _cpu_layout(name: str, run: RunConfig, problems: list[str]) -> tuple[int, int]:
    if run.device == "cuda":
        problems.append(f"runs.{name}.device = 'cuda' needs gpus > 0; set gpus, or device: cpu")
    if run.nodes not in (None, 1):
        problems.append(f"runs.{name}.nodes = {run.nodes}: CPU runs (gpus: 0) use one node; remove nodes")
    if run.nproc_per_node not in (None, run.processes):
        problems.append(
            f"runs.{name}.nproc_per_node = {run.nproc_per_node} differs from processes = "
            f"{run.processes}; set only processes for CPU runs"
        )
    return 1, run.processes


def batch_maths(name: str, run: RunConfig, world: int, problems: list[str]) -> BatchPlan:
    """global = per_device x world x accumulation, or the problem with the values that would divide."""
    glob, per_device = run.batch.global_, run.batch.per_device
    step = per_device * world
    if glob % step == 0:
        return BatchPlan(glob, per_device, glob // step)
    lower, upper = max(step, glob // step * step), math.ceil(glob / step) * step
    fixes = [f"batch.global: {v}" for v in sorted({lower, upper})]
    if glob % world == 0:
        per_rank = glob // world
        divisors = [d for d in range(1, per_rank + 1) if per_rank % d == 0]
        near = sorted(divisors, key=lambda d: abs(d - per_device))[:2]
        fixes += [f"batch.per_device: {d}" for d in sorted(near)]
    problems.append(
        f"runs.{name}.batch.global = {glob} is not per_device ({per_device}) x world size ({world}) x "
        f"gradient-accumulation steps; use " + " or ".join(fixes)
    )
    return BatchPlan(glob, per_device, None)


def per_node(name: str, run: RunConfig, site: Site, nproc: int, problems: list[str]) -> tuple[int, int, float]:
    """(cores per rank, cores per node, memory GB per node), refused where a node has less."""
    cores, mem = gpu_share(site) if run.gpus else (DEFAULT_CPUS_PER_RANK["cpu"], DEFAULT_MEM_GB_PER_RANK["cpu"])
    cpus_per_rank = run.cpus_per_rank or cores
    mem_gb_per_rank = run.mem_gb_per_rank or mem
    cpus_per_node, mem_gb_per_node = cpus_per_rank * nproc, mem_gb_per_rank * nproc
    if cpus_per_node > site.cores_per_node:
        problems.append(
            f"runs.{name}.cpus_per_rank = {cpus_per_rank} x {nproc} ranks per node = {cpus_per_node} cores, "
            f"but a node has {site.cores_per_node}; use cpus_per_rank: {site.cores_per_node // nproc}"
        )
    if mem_gb_per_node > site.mem_gb_per_node:
        problems.append(
            f"runs.{name}.mem_gb_per_rank = {mem_gb_per_rank} x {nproc} ranks per node = {mem_gb_per_node} GB, "
            f"but a node has {site.mem_gb_per_node} GB; use mem_gb_per_rank: {int(site.mem_gb_per_node // nproc)}"
        )
    return cpus_per_rank, cpus_per_node, mem_gb_per_node

"""strategy: auto decided, from the per-GPU memory estimate the torch side makes (train/estimate.py).

The decision is the plan's; the estimate imports torch and builds the run's model, so the plan step
(`airetrain resolve`) makes it in a process of its own and hands it here. Snakemake's parse of the
workflow never does either.
"""
from __future__ import annotations

from ..records import Plan
from . import refusals


def needs_estimate(plan: Plan) -> bool:
    """Whether deciding (or describing) the strategy needs the memory estimate: on GPUs, for auto and fsdp."""
    return plan.device == "cuda" and plan.strategy in ("auto", "fsdp")


def decide(plan: Plan, memory: dict | None) -> Plan:
    """The plan with `strategy: auto` decided from the memory estimate (None where needs_estimate is
    false); an FSDP plan asked for carries the estimate of how it shards."""
    if plan.strategy == "fsdp" and memory is not None:
        return plan.replace(memory_estimate={**memory, "decision": "fsdp",
                                             "reason": "strategy: fsdp (asked for); " + memory["reason"]})
    if plan.strategy != "auto":
        return plan
    if memory is None:
        memory = {"decision": "ddp", "reason": "CPU run: no GPU memory budget applies; DDP"}
    problems: list[str] = []
    if memory["decision"] == "fsdp":
        refusals.fsdp(plan.run, plan.config, problems)
    refusals.refuse(plan.run, problems, f"refused after the memory estimate chose FSDP ({memory['reason']})")
    checkpointing = plan.config.activation_checkpointing
    return plan.replace(strategy=memory["decision"], memory_estimate=memory,
                        activation_checkpointing=checkpointing is True
                        or (checkpointing == "auto" and memory["decision"] == "fsdp"))

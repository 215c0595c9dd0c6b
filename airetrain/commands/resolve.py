"""`airetrain resolve`, the plan step: a run's plan completed where its files, its code and its GPUs are
known. A command of its own: it joins the planner (plan/) to the torch side (train/), which the stages
below never import from each other.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:   # the records are imported where a plan is resolved, not by every command's start
    from ..records import Plan


def resolve_plan(plan: Plan) -> Plan:
    """The plan as plan.json holds it: a dataset folder's files counted against the fast root's quota,
    the durable root's room for its checkpoints checked, the user's code tried once (train/plan_check.py: it fails here,
    not after the wait in the queue), and strategy: auto decided from the memory estimate, which the
    torch side makes (building the run's model on the meta device) where the decision needs it."""
    from ..plan.strategy import decide, needs_estimate
    from ..quota import durable_room, walked
    from ..train.plan_check import check, check_evaluation, needs_check

    plan = walked(plan)   # a dataset folder without an index or files.json: counted here, once
    if needs_check(plan):
        check(plan)
    if plan.evaluates:
        check_evaluation(plan)
    memory = None
    if needs_estimate(plan):
        from ..train.estimate import for_plan
        memory = for_plan(plan)
    plan = decide(plan, memory)
    durable_room(plan)   # keep + 1 checkpoints of the size estimated, or of the run's last one
    return plan

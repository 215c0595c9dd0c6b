"""`airetrain health` and `airetrain health-node`: the health step the workflow runs first in every job
of a run (health/preflight.py), and each node's part of it; `airetrain requeue-excluding`, the job step
that requeues a job without its sick nodes."""
from __future__ import annotations

import sys


def _health(args) -> None:
    from ..health.preflight import preflight_step

    sys.exit(preflight_step(args.plan, args.out))


def _health_node(args) -> None:
    from ..health.preflight import node_step

    node_step(args.plan, args.out)


def _requeue_excluding(args) -> None:
    import signal

    from ..cluster.slurm import requeue_excluding

    signal.signal(signal.SIGTERM, signal.SIG_IGN)   # the requeue signals this step: the release must still come
    requeued, said = requeue_excluding(args.job, args.nodes.split(","))
    print(said, flush=True)
    sys.exit(0 if requeued else 1)


def add_parsers(sub) -> None:
    p = sub.add_parser("health", help="check every node of the job before staging; requeue the job without a "
                                      "node that fails")
    p.add_argument("--plan", required=True, help="results/<run>/plan.json")
    p.add_argument("--out", required=True, help="health.json, written where every node passed")
    p.set_defaults(func=_health)
    p = sub.add_parser("health-node", help="(one task per node, from `airetrain health`) check this node")
    p.add_argument("--plan", required=True)
    p.add_argument("--out", required=True, help="the folder for <host>.json")
    p.set_defaults(func=_health_node)
    p = sub.add_parser("requeue-excluding", help="(a step of the job, from `airetrain health` or a straggler's stop) "
                                                 "requeue the job without these nodes")
    p.add_argument("--job", required=True)
    p.add_argument("--nodes", required=True, help="comma-separated host names")
    p.set_defaults(func=_requeue_excluding)

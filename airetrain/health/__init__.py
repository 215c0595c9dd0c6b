"""The node check before staging: every node of the job checked, and the sick ones left out.

    checks      one node's checks: its GPUs, the fast and durable roots, the network interfaces
    preflight   the health step: the check on every node, the verdict, and the job requeued without
                the nodes that failed (or the run failed, where no node would do)

Stragglers, which only training shows, are the trainer's (train/stragglers.py).
"""

"""What runs outside torchrun: the launch of a run's training on its allocation.

    launch   the torchrun command, locally or as a SLURM step on every node; requeue after a stop
    lock     one trainer per run: a lock in the durable run directory
    script   script mode: a user's own torchrun script, launched as the built-in trainer is
"""

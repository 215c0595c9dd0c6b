"""A run's durable directory on scratch, <scratch>/airetrain/<run>/, and what it keeps across every job, requeue
and rerun (shared: every stage and command may use it). Each file's name is here, nowhere else.

    run_log        the run's logs (sessions, starts, stops, health, hangs) and its files' names, the lock's too
    metrics_log    the metric history, and results/<run>/metrics.jsonl restored from it
    history        each finished run's profile and figures, for the forecast and right-sizing
    capture        the code a run captures, and whether it changed since
    fingerprints   what a checkpoint's training computes, to tell a resumable checkpoint from another training's
    provenance     the project's git state and airetrain's version, for the run record
    batch_changes  the smaller batches a run took after running out of GPU memory
    memory_raises  the host memory a run asks for after SLURM ended a job of it OUT_OF_MEMORY
"""

"""Trackers (Weights & Biases, MLflow): sinks of what the trainer already measures, one tracker run per
airetrain run however many sessions it takes, each step logged once.

    registry     the trackers as a table: a tracking: key -> its sink class (what differs is the class's)
    trackers     the trackers a run names, as sinks; the trainer's start of them
    identity     the tracker run of an airetrain run: its ids, kept in the run's durable directory
    names        what a figure is called in a tracker (and in TensorBoard); names and URIs checked
    sender       rank 0's sending thread: figures queued, sent to every tracker, failures counted
    follow       a script's metrics.jsonl followed by the launcher, its lines sent through a sender
    opening      what a tracker run is told once: config, group, sweep keys, code, versions
    wandb_sink   Weights & Biases: offline files on scratch (the default), or online
    wandb_files  the history in W&B's offline files, read without W&B (what a resumed session skips)
    mlflow_sink  MLflow: a server, or a store
    ending       what the promote step tells the tracker run: the summary, job ids, the weights
    sync         `airetrain sync`: offline W&B runs uploaded from the login node

The trackers' packages are optional (airetrain[wandb], airetrain[mlflow]): imported only inside
their sinks, and only where a run names them.
"""

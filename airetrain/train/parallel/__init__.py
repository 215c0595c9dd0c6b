"""Data parallelism: the process group, and the model wrapped for DDP or FSDP2.

    process_group  which device, which backend, who is rank 0; collectives' helpers
    wrap           the model wrapped for DDP, or FSDP2 per unit; full state for checkpoints
    fsdp_units     the units of any model that FSDP shards and activation checkpointing wraps
"""

"""Checkpoints, from the training process to durable storage.

    store     the on-disk format: files and DCP directories, their manifest.json, verification, loading
    policy    when to save, and where a resumed run continues (no files, no torch)
    manager   the trainer's checkpointer: the policy applied, background saves, promotion, resuming
    writer    the process that writes a DDP checkpoint in the background, fed through shared memory
    promote   the promote step: a checkpoint made durable on scratch and verified
    mirror    script mode: whatever a user's script writes to its checkpoint directory, made durable
"""

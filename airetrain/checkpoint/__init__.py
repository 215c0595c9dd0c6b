"""Checkpoints, from the training process to durable storage.

    store         the on-disk format: files and DCP directories, their manifest.json, verification, loading
    manager       the trainer's checkpointer: the schedule applied, background saves, promotion, resuming
    background    where a save is written: a writer process, a thread, DCP's async_save, or in the loop
    writer        the process that writes a DDP checkpoint in the background, fed through shared memory
    promote       a checkpoint made durable on scratch and verified (and the best one with it)
    promote_step  the promote step: the final and best checkpoints, their weights, checkpoint.json
    weights       model.safetensors and best.safetensors beside the durable checkpoint
    mirror        script mode: whatever a user's script writes to its checkpoint directory, made durable

When to save is the shared schedule (airetrain/schedule.py), which the evaluator also reads.
"""

"""Checkpoints, from the training process to durable storage.

    store     the on-disk format: files and DCP directories, their manifest.json, verification, loading
    manager   when to save, background writes to the fast root, copying to scratch, resuming
    promote   the promote step: the final checkpoint made durable on scratch and verified
"""

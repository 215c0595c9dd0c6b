"""Staging: the built-in datasets written before it, and the stage step (copy, verify, per node).

    prepare    the built-in datasets (airetrain/catalog.py) written to scratch before staging
    staging    the stage step: the dataset onto the fast root, once per job or on every node; stage.json
    transfer   copy a directory tree, verified and incremental; shards against their index
    pack       `airetrain pack`: a tree as tar shards with an index

Imports no torch (a test checks).
"""

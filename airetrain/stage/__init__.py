"""Staging: the built-in datasets written before it, and the stage step (copy, verify, per node).

Imports no torch (a test checks).
"""

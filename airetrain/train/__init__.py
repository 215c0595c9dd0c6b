"""Training under torchrun: the loop and its pieces, the launch, and script mode.

See loop.py, which reads top to bottom.
"""

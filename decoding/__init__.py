"""STATIC index, constraint interface and baselines, and one jit-compiled beam search."""

"""Process-level settings of the `genret` command: the compile cache, huge pages and the CPU
latency mode."""

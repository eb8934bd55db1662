"""Process-level settings of the `genret` command: the compile cache and huge pages."""

"""The `genret` command line, config presets, evaluations, benchmarks and reports."""

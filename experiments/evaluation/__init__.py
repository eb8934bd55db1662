"""Cold-start and leave-one-out evaluation, metrics, baselines, diagnostics, report and plots."""

"""Write WORKDIR/results/report.md (and its PNG plots) from the results present: our numbers, the
papers' numbers where they measured this dataset, and the preset and config of the run."""

import argparse

from experiments.commands import _common as common
from experiments.pipeline import stages


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_workdir_arg(parser)


def run(args: argparse.Namespace) -> int:
    layout = common.layout_of(args)
    layout.require(layout.config, f"genret pipeline --workdir {layout.root}")
    cfg = common.resolve_config(args, layout)
    written = stages.write_report(cfg, layout)
    print(written.summary["report"])
    return 0

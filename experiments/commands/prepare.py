"""Read raw review/meta files (or generate the synthetic ones) and write the prepared dataset.

The result, W/prepared, is a TFDS array_record dataset keyed by a hash of the raw files and the
data config: rerunning with the same inputs reuses it. For --dataset synthetic the raw files are
generated into W/raw first; Amazon data is read from --raw-dir (default:
../shared/data/amazon2014/<Category>); --dataset interactions reads your own table (README).
"""

import argparse
import json

from experiments.commands import _common as common
from experiments.pipeline import stages


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_dataset_args(parser)
    parser.add_argument(
        "--skip-bad-lines",
        action="store_true",
        help="count and report malformed lines instead of failing on the first",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide TFDS's progress bars")
    common.add_workdir_arg(parser)
    common.add_config_args(parser)


def run(args: argparse.Namespace) -> int:
    if args.skip_bad_lines:
        args.overrides = [*args.overrides, "data.skip_bad_lines=true"]
    layout = common.layout_of(args)
    cfg = common.resolve_config(args, layout, dataset_args=True)
    written = stages.prepare(cfg, layout, progress=not args.no_progress)
    stages.save_config(cfg, layout)
    print(json.dumps(written.summary))
    return 0

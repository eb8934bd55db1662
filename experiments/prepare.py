"""Read raw review/meta files (or generate the synthetic ones) and write the prepared dataset.

The result, W/prepared, is a TFDS array_record dataset keyed by a hash of the raw files and the
data config: rerunning with the same inputs reuses it. For --dataset synthetic the raw files are
generated into W/raw first; real datasets read --raw-dir (default: ../shared/data/amazon2014/<Cat>).
"""

import argparse
import json
from pathlib import Path

from data import prepared
from experiments import common


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dataset",
        choices=common.DATASETS,
        default=None,
        help="default: the config's data.dataset (synthetic for a fresh work directory)",
    )
    parser.add_argument(
        "--raw-dir",
        type=Path,
        default=None,
        help="folder with reviews_<Cat>_5.json[.gz] and meta_<Cat>.json[.gz]",
    )
    parser.add_argument(
        "--skip-bad-lines",
        action="store_true",
        help="count and report malformed lines instead of failing on the first",
    )
    common.add_workdir_arg(parser)
    common.add_config_args(parser)


def run(args: argparse.Namespace) -> int:
    if args.skip_bad_lines:
        args.overrides = [*args.overrides, "data.skip_bad_lines=true"]
    cfg = common.resolve_config(args, dataset=args.dataset)
    dataset = cfg.data.dataset
    if dataset == "synthetic":
        if args.raw_dir is not None:
            raise ValueError("--raw-dir: the synthetic dataset is generated into WORKDIR/raw")
        raw_dir = args.workdir / "raw"
    elif args.raw_dir is not None:
        raw_dir = args.raw_dir
    elif cfg.data.raw_dir:
        raw_dir = Path(cfg.data.raw_dir)
    else:
        raw_dir = common.default_raw_dir(dataset)
    out = prepared.prepare(cfg.data, raw_dir, common.prepared_dir(args.workdir))
    report = json.loads((out / "report.json").read_text())
    print(json.dumps({"prepared": str(out), **report}))
    return 0

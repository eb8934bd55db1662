"""Shared by the command modules: config resolution, work-directory layout, dataset paths."""

import argparse
from pathlib import Path

from data import atomic
from experiments import config as config_lib

DATASETS = ("synthetic", "beauty", "sports", "toys")
CATEGORY_DIRS = {"beauty": "Beauty", "sports": "Sports_and_Outdoors", "toys": "Toys_and_Games"}
# Where the real files live on development machines and in CI (see README).
DEFAULT_AMAZON_ROOT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "amazon2014"


def add_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        default=None,
        help="preset name (experiments/configs/NAME.py); default: the work directory's "
        f"config.json, else the dataset's preset. One of: {', '.join(config_lib.preset_names())}",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. --set seqmodel.num_layers=4 (repeatable)",
    )


def add_workdir_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workdir", required=True, type=Path, help="the run's work directory")


def resolve_config(args: argparse.Namespace, *, dataset: str | None = None, save: bool = True):
    """Preset (or the saved config.json) + --set overrides; saved back to WORKDIR/config.json."""
    workdir: Path = args.workdir
    saved = workdir / "config.json"
    if getattr(args, "config", None):
        cfg = config_lib.load_preset(args.config)
    elif saved.exists():
        cfg = config_lib.load_json(saved)
    else:
        cfg = config_lib.load_preset(dataset or "synthetic")
    cfg = config_lib.apply_overrides(cfg, getattr(args, "overrides", []) or [])
    if dataset is not None and cfg.data.dataset != dataset:
        raise ValueError(
            f"--dataset {dataset} does not match the config's data.dataset={cfg.data.dataset}; "
            "use a fresh --workdir or a matching --config"
        )
    if save:
        atomic.write_json(saved, config_lib.to_dict(cfg))
    return cfg


def check_cold_start_fraction(fraction: float) -> None:
    """The protocol's cold-start fraction p must lie in (0, 0.5]."""
    if not 0.0 < fraction <= 0.5:
        raise ValueError(f"--cold-start: expected a fraction in (0, 0.5], got {fraction}")


def default_raw_dir(dataset: str) -> Path:
    """The folder holding reviews_<Cat>_5.json.gz and meta_<Cat>.json.gz for a real dataset."""
    if dataset not in CATEGORY_DIRS:
        raise ValueError(f"--dataset: {dataset!r} has no raw folder; choose from {DATASETS}")
    return DEFAULT_AMAZON_ROOT / CATEGORY_DIRS[dataset]


# Work-directory layout: one place that names every artifact.
def prepared_dir(workdir: Path) -> Path:
    return workdir / "prepared"


def tokenizer_dir(workdir: Path) -> Path:
    return workdir / "tokenizer"


def retriever_dir(workdir: Path, split: str) -> Path:
    """split: 'cold_0.02', 'cold_0.05', ... or 'loo'."""
    return workdir / f"retriever_{split}"


def results_dir(workdir: Path) -> Path:
    return workdir / "results"

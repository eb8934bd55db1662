"""Shared by the command modules: arguments, resolving the config once, and checking arguments
before any artifact is read."""

import argparse
import dataclasses
import json
import os
import tempfile
from pathlib import Path

from data.config import AMAZON_SHORTCUTS, DATASETS
from data.errors import ArgumentError, os_reason
from experiments import config as config_lib
from experiments.bench.constraints import (
    METHODS,
    BenchConfig,
    available_bytes,
)
from experiments.pipeline.layout import RunLayout
from seqmodel.config import SeqModelConfig


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


def path_arg(text: str) -> Path:
    """An argparse type: a path, never empty (Path("") is the current directory), that the system
    can look up: a symlink loop, a name too long, a file or a folder without permission on the
    way is refused here, in one line naming the argument. A path that does not exist yet passes."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    try:
        os.stat(text)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise argparse.ArgumentTypeError(f"{text}: {os_reason(e)}") from None
    return Path(text)


def add_workdir_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workdir", required=True, type=path_arg, help="the run's work directory")


def add_dataset_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dataset",
        choices=DATASETS,
        default=None,
        help="synthetic (generated), beauty / sports / toys (Amazon 2014 shortcuts), amazon2014 "
        "(any category: --category), interactions (your own table: --raw-dir; see README); "
        "default: the config's data.dataset",
    )
    parser.add_argument(
        "--category",
        default=None,
        help="with --dataset amazon2014: the category's file name part, e.g. Beauty or "
        "Cell_Phones_and_Accessories (reviews_<category>_5.json.gz)",
    )
    parser.add_argument(
        "--raw-dir",
        type=path_arg,
        default=None,
        help="folder of the raw files (default for Amazon data: ../shared/data/amazon2014/<Cat>)",
    )


def _number_list(convert, accept, expected: str):
    """An argparse type: comma-separated numbers read by `convert`, each passing `accept`; else
    the one line "expected {expected}, got '...'"."""

    def parse(text: str) -> tuple:
        try:
            values = tuple(convert(x) for x in text.split(","))
        except ValueError:
            values = ()
        if not values or not all(accept(v) for v in values):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return values

    return parse


def int_list(minimum: int, example: str, noun: str = "integers"):
    """An argparse type: comma-separated integers, each >= `minimum` (e.g. `example`)."""
    return _number_list(int, lambda v: v >= minimum, f"{noun} >= {minimum} like {example}")


def float_list(low: float, high: float, example: str, noun: str = "values"):
    """An argparse type: comma-separated numbers, each in [low, high) (e.g. `example`)."""
    return _number_list(
        float, lambda v: low <= v < high, f"{noun} in [{low}, {high}) like {example}"
    )


def positive(name: str, value: int | None, *, allow_none: bool = True) -> None:
    """An integer argument that must be >= 1; checked before any artifact is read."""
    if value is None and allow_none:
        return
    if value is None or value < 1:
        raise ArgumentError(f"{name}: must be >= 1, got {value}")


# float32 [B, K, V] buffers a beam search step holds at once: log-probs, candidate scores, the
# keys top-k ranks and their padded copy (decoding.beam_search._select).
_SCORE_BUFFERS = 4


def bytes_per_beam(seq: SeqModelConfig, levels: int, vocab: int) -> int:
    """Bytes a decode holds per (user, beam), at least: its score buffers and, for the token
    model, its KV cache (history tokens, BOS and the L - 1 codes fed back, in every layer)."""
    cache = 0
    if seq.arch == "token":
        slots = seq.max_history * levels + levels
        cache = 2 * seq.num_layers * slots * seq.d_model
    return 4 * (_SCORE_BUFFERS * vocab + cache)


def check_beam_size(
    flag: str,
    beam_size: int,
    *,
    batch_size: int,
    per_beam: int,
    items: int | None,
    where: str = "",
    batch_flag: str = "--batch-size",
) -> None:
    """Refuses, before anything is decoded, a beam width wider than the `items` that can be
    decoded (`where` says whose) or whose buffers, `per_beam` bytes for each of the batch's
    beams, do not fit in the memory available."""
    if items is not None and beam_size > items:
        raise ArgumentError(
            f"{flag} {beam_size}: more beams than the {items:,} items {where}; at most {items:,}"
        )
    need, have = batch_size * beam_size * per_beam, available_bytes()
    if need > have:
        fit = have // (batch_size * per_beam)
        raise ArgumentError(
            f"{flag} {beam_size} x {batch_flag} {batch_size}: decoding needs about "
            f"{_size(need)}, more than the {_size(have)} available; at most {fit:,} beams fit"
        )


def _size(n: int) -> str:
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"


def check_eval_beam_size(
    flag: str, beam_size: int, cfg: config_lib.Config, layout: RunLayout, *, batch_size: int
) -> None:
    """check_beam_size for a retriever trained with `cfg`, decoding over the prepared catalog
    (its size from the prepared report; the memory check alone where it is not prepared yet)."""
    levels = cfg.rqvae.num_levels + 1  # the last level tells colliding items apart
    try:
        items = int(json.loads((layout.prepared / "report.json").read_text())["items"])
    except (OSError, ValueError, KeyError, TypeError):
        items = None  # the command names the missing or damaged prepared dataset itself
    per_beam = bytes_per_beam(cfg.seqmodel, levels, cfg.rqvae.codebook_size)
    where = f"of the catalog ({layout.prepared})"
    check_beam_size(
        flag, beam_size, batch_size=batch_size, per_beam=per_beam, items=items, where=where
    )


def check_retriever_beam_size(
    flag: str, beam_size: int, model_file: Path, *, batch_size: int
) -> None:
    """check_beam_size for the retriever described by `model_file` (retriever.json), over every
    SID it can name (a live catalog grows); nothing where there is none (its loader says so)."""
    from seqmodel.inference import read_description

    if not model_file.is_file():
        return
    _, seq, space = read_description(model_file, "retriever", "train-retriever")
    L, V = space.num_levels, space.codebook_size
    check_beam_size(
        flag,
        beam_size,
        batch_size=batch_size,
        per_beam=bytes_per_beam(seq, L, V),
        items=V**L,
        where=f"that {L} levels of {V} codes can name",
    )


def layout_of(args: argparse.Namespace) -> RunLayout:
    layout = RunLayout(args.workdir)
    check_creatable(layout.root)
    return layout


def check_creatable(root: Path, flag: str = "--workdir") -> None:
    """An ArgumentError when `root` does not exist and cannot be made (a read-only place, /proc),
    so that no work is done first; tried with an empty folder made and removed at once, as
    os.access answers yes to root wherever the mode bits would."""
    root = Path(root)
    if root.exists():
        return
    parent = root.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ArgumentError(f"{flag} {root}: {parent} is a file, expected a directory")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".genret-", dir=parent))
    except OSError as e:
        raise ArgumentError(
            f"{flag} {root}: cannot be created in {parent} ({os_reason(e)})"
        ) from None


def _default_preset(dataset: str | None, category: str | None) -> str:
    """The dataset's own preset; Amazon categories and your own data take Beauty's (real-data)
    settings, with the dataset fields replaced."""
    if dataset in (None, "synthetic"):
        return "synthetic"
    if dataset in AMAZON_SHORTCUTS:
        return dataset
    return "beauty"


def resolve_config(
    args: argparse.Namespace, layout: RunLayout, *, dataset_args: bool = False
) -> config_lib.Config:
    """Preset (or the work directory's config.json) + dataset arguments + --set overrides,
    validated. Nothing is written: the stage runner saves the config once a stage succeeded."""
    dataset = getattr(args, "dataset", None) if dataset_args else None
    category = getattr(args, "category", None) if dataset_args else None
    raw_dir = getattr(args, "raw_dir", None) if dataset_args else None
    if getattr(args, "config", None):
        cfg, from_saved = config_lib.load_preset(args.config), False
    elif layout.config.exists() or layout.config.is_symlink():
        cfg, from_saved = config_lib.load_json(layout.config), True
    else:
        cfg, from_saved = config_lib.load_preset(_default_preset(dataset, category)), False
    data = cfg.data
    if dataset is not None and dataset != data.dataset:
        if from_saved:
            raise ArgumentError(
                f"--dataset {dataset}: {layout.config} was made for data.dataset={data.dataset}; "
                "use a fresh --workdir or pass --config NAME"
            )
        data = dataclasses.replace(data, dataset=dataset)
    if category is not None:
        if data.dataset != "amazon2014":
            raise ArgumentError(f"--category: only with --dataset amazon2014, not {data.dataset}")
        data = dataclasses.replace(data, category=category)
    if raw_dir is not None:
        if data.dataset == "synthetic":
            raise ArgumentError("--raw-dir: the synthetic dataset is generated into WORKDIR/raw")
        data = dataclasses.replace(data, raw_dir=str(Path(raw_dir).resolve()))
    cfg = dataclasses.replace(cfg, data=data)
    cfg = config_lib.apply_overrides(cfg, getattr(args, "overrides", []) or [])
    return config_lib.validate(cfg)


def add_cpu_cores_arg(parser: argparse.ArgumentParser) -> None:
    """--cpu-cores: the latency mode for small calls on a CPU (experiments.runtime.latency)."""
    parser.add_argument(
        "--cpu-cores",
        type=int,
        default=None,
        metavar="N",
        help="pin the process to N cores and run each JAX call on the calling thread: lower "
        "latency for small decoding calls on a CPU (default: every core, asynchronous dispatch)",
    )


def add_bench_args(parser: argparse.ArgumentParser) -> None:
    """Flags shared with bench-sweep."""
    d = BenchConfig()
    add_cpu_cores_arg(parser)
    parser.add_argument("--levels", type=int, default=d.levels, help="L, codes per SID")
    parser.add_argument("--batch", type=int, default=d.batch, help="users per call")
    parser.add_argument("--beam", type=int, default=d.beam, help="K, beam width")
    parser.add_argument("--methods", default=",".join(d.methods), help=f"subset of {METHODS}")
    parser.add_argument("--reps", type=int, default=d.reps, help="timed calls per measurement")
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--dense-levels", type=int, default=d.dense_levels)
    parser.add_argument("--loop", choices=("unroll", "scan"), default="unroll")
    parser.add_argument("--ppv-top-k", type=int, default=d.ppv_top_k, help="PPV approximate k")
    parser.add_argument(
        "--hash-bits",
        type=int,
        default=d.hash_bits_per_prefix,
        help="hash bitmap bits per stored prefix",
    )


def bench_config(args: argparse.Namespace, **overrides) -> BenchConfig:
    for name in ("levels", "batch", "beam", "reps"):
        if getattr(args, name) < 1:
            raise ArgumentError(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.dense_levels < 0 or args.dense_levels > args.levels:
        raise ArgumentError(f"--dense-levels must be in [0, --levels], got {args.dense_levels}")
    unknown = [m for m in args.methods.split(",") if m and m not in METHODS]
    if unknown or not args.methods.strip(","):
        raise ArgumentError(f"--methods: unknown {unknown or 'empty'}; choose from {METHODS}")
    kw = dict(
        levels=args.levels,
        batch=args.batch,
        beam=args.beam,
        reps=args.reps,
        seed=args.seed,
        dense_levels=args.dense_levels,
        unroll=args.loop == "unroll",
        methods=tuple(m for m in args.methods.split(",") if m),
        ppv_top_k=args.ppv_top_k,
        hash_bits_per_prefix=args.hash_bits,
    )
    cfg = BenchConfig(**{**kw, **overrides})
    score_bytes = 4 * _SCORE_BUFFERS * cfg.vocab
    check_beam_size(
        "--beam",
        cfg.beam,
        batch_size=cfg.batch,
        per_beam=score_bytes,
        items=None,
        batch_flag="--batch",
    )
    return cfg


def add_holdout_of_arg(parser: argparse.ArgumentParser) -> None:
    """--holdout-of DIR (repeatable): with --validation, the outside_holdout block also leaves
    out the users that the leave-one-out model in DIR chose its checkpoint on."""
    parser.add_argument(
        "--holdout-of",
        action="append",
        default=[],
        metavar="DIR",
        help="with --validation: the outside_holdout block also leaves out the users that the "
        "leave-one-out model in DIR (a retriever, or a SASRec or parallel-codes run such as "
        "WORKDIR/sasrec_loo) chose its checkpoint on, so that runs whose holdouts differ "
        "compare on the same users (repeatable)",
    )


def add_loo_model_args(parser: argparse.ArgumentParser, results_name: str) -> None:
    """The arguments of a command that trains one leave-one-out model in the SASRec harness
    (`genret sasrec`, `genret parallel`): its results go to results/[validation_]NAME.json."""
    add_workdir_arg(parser)
    add_config_args(parser)
    parser.add_argument(
        "--validation",
        action="store_true",
        help="rank every user's second-to-last item instead of the last (tuning; the test "
        f"targets are not read); writes results/validation_{results_name}.json",
    )
    add_holdout_of_arg(parser)
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def run_loo_model(args: argparse.Namespace, stage, method: str) -> int:
    """Resolve the config, run `stage` (stages.sasrec or stages.parallel), save the config and
    print the `method`'s numbers."""
    from experiments.pipeline import stages  # here: the other users of this module need no JAX

    layout = layout_of(args)
    cfg = resolve_config(args, layout)
    written = stage(
        cfg,
        layout,
        validation=args.validation,
        holdout_of=args.holdout_of,
        progress=not args.no_progress,
    )
    stages.save_config(cfg, layout)
    print(json.dumps(written.summary["methods"][method], indent=2))
    return 0

"""Retriever training throughput: milliseconds per step, non-PAD tokens per second and the time of
one epoch, for several example layouts and model sizes on a work directory's data, all timed in
one process with their steps interleaved (a shared machine slows every variant alike).

Reads the dataset and SIDs of WORKDIR (`genret prepare`, `genret train-tokenizer`); trains
nothing that is kept. Writes WORKDIR/results/bench_train_<split>.json and .md (the printed table).
Example:
    genret bench-train --workdir runs/beauty --layouts causal,bucketed,packed --sizes 2x64,4x128
    genret bench-train --workdir runs/beauty --layouts bucketed --archs token,item
    genret bench-train --workdir runs/beauty --layouts bucketed --ema-decays 0,0.999
    genret bench-train --workdir runs/beauty --layouts bucketed --cooc-distills 0,0.5
"""

import argparse
import dataclasses
import itertools
import json
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import numpy as np

import rqvae
from data import atomic
from data.errors import ArgumentError
from experiments.commands import _common as common
from experiments.evaluation.retrieval import load_inputs
from experiments.pipeline.artifacts import split_examples
from experiments.pipeline.layout import Split
from seqmodel import sharding
from seqmodel.config import ARCHS, LAYOUTS
from seqmodel.state import new_train_state
from seqmodel.tokens import PAD, TokenSpace, sid_tokens
from seqmodel.train import make_trainer, training_batches


def _sizes(text: str) -> tuple[tuple[int, int], ...]:
    try:
        pairs = tuple(tuple(int(v) for v in s.split("x")) for s in text.split(",") if s.strip())
    except ValueError:
        pairs = ((0,),)
    if not pairs or any(len(p) != 2 or min(p) < 1 for p in pairs):
        raise argparse.ArgumentTypeError(f"expected LAYERSxWIDTH,... e.g. 2x64,4x128, got {text!r}")
    return pairs


def _names(allowed: tuple[str, ...]):
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(x.strip() for x in text.split(",") if x.strip())
        if not names or any(n not in allowed for n in names):
            raise argparse.ArgumentTypeError(f"expected some of {','.join(allowed)}, got {text!r}")
        return names

    return parse


class Sweep(NamedTuple):
    """One option timed side by side: its argument, config field and label in a variant's name."""

    arg: str  # the argument's name (--item-buckets for item_buckets)
    field: str  # the SeqModelConfig field it sets
    label: str  # shown before the value in a variant's name
    parse: Callable[[str], tuple]  # the argument's parser
    help: str  # what its values are


SWEEPS = (
    Sweep(
        "item_buckets",
        "item_embed_buckets",
        "ids",
        common.int_list(0, "0,65536", "counts"),
        "hashed item-embedding rows for the item-level retriever, e.g. 0,65536",
    ),
    Sweep(
        "ema_decays",
        "ema_decay",
        "ema",
        common.float_list(0.0, 1.0, "0,0.999", "decays"),
        "parameter moving-average decays, e.g. 0,0.999 (0: none)",
    ),
    Sweep(
        "cooc_distills",
        "cooc_distill",
        "teacher",
        common.float_list(0.0, 1.0, "0,0.5", "weights"),
        "co-occurrence teacher weights, e.g. 0,0.5 (0: none; not with packed rows)",
    ),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_workdir_arg(parser)
    parser.add_argument("--split", choices=("loo", "cold"), default="loo")
    parser.add_argument("--cold-start", type=float, default=None, metavar="P")
    parser.add_argument(
        "--layouts",
        type=_names(LAYOUTS),
        default=("causal", "bucketed", "packed"),
        help="e.g. causal,bucketed,packed",
    )
    parser.add_argument(
        "--archs",
        type=_names(ARCHS),
        default=None,
        help="retriever architectures, e.g. token,item (packed rows are token only); "
        "default: the config's",
    )
    parser.add_argument(
        "--sizes",
        type=_sizes,
        default=None,
        help="LAYERSxWIDTH,... (heads: width/32, MLP: 2 x width); default: the config's model",
    )
    for sweep in SWEEPS:
        parser.add_argument(
            "--" + sweep.arg.replace("_", "-"),
            type=sweep.parse,
            default=None,
            help=f"{sweep.help} (seqmodel.{sweep.field}); default: the config's",
        )
    parser.add_argument("--steps", type=int, default=20, help="timed steps per variant")
    common.add_config_args(parser)


def _variants(cfg, layouts, sizes, archs=None, sweeps=None):
    """(name, SeqModelConfig) for every size x arch x swept option x layout; `sweeps` maps a
    SWEEPS argument name to its values (absent or None: the config's value alone)."""
    seq = cfg.seqmodel
    shapes = sizes or ((seq.num_layers, seq.d_model),)
    archs = archs or (seq.arch,)
    sweeps = sweeps or {}
    axes = [(sw.field, sw.label, sweeps.get(sw.arg) or (getattr(seq, sw.field),)) for sw in SWEEPS]
    for layers, width in shapes:
        for arch, *values in itertools.product(archs, *(vals for _, _, vals in axes)):
            options = {field: val for (field, _, _), val in zip(axes, values, strict=True)}
            if arch == "token" and options["item_embed_buckets"]:
                continue  # the hashed item embedding is the item-level retriever's
            for lay in layouts:
                if lay == "packed" and (arch == "item" or options["cooc_distill"]):
                    continue  # the item-level retriever and the teacher take one user per row
                v = dataclasses.replace(seq, layout=lay, arch=arch, **options)
                if (layers, width) != (seq.num_layers, seq.d_model):
                    v = dataclasses.replace(
                        v,
                        num_layers=layers,
                        d_model=width,
                        num_heads=max(width // 32, 1),
                        mlp_dim=2 * width,
                    )
                name = f"{lay} {layers}x{width}" + (f" {arch}" if len(archs) > 1 else "")
                for (_, label, vals), val in zip(axes, values, strict=True):
                    name += f" {label} {val:g}" if len(vals) > 1 else ""
                yield name, v


def bench_train(
    cfg,
    layout,
    split: Split,
    layouts,
    sizes,
    steps: int,
    log=print,
    archs=None,
    sweeps=None,
) -> dict:
    ds, sids = load_inputs(cfg, layout)
    V = rqvae.token_vocab_size(sids, cfg.rqvae.codebook_size)
    data = split_examples(ds, sids, split, V, cfg.seqmodel)
    item_tokens = sid_tokens(data.sids, V)
    space = TokenSpace(num_levels=data.sids.shape[1], codebook_size=V)
    mesh = sharding.make_mesh()
    runs = {}
    for name, v in _variants(cfg, layouts, sizes, archs, sweeps):
        sharding.check_batch_size(v.batch_size, mesh)
        iterator, per_epoch = training_batches(v, data, item_tokens)
        batches = [next(iterator)]
        # The host's share: making a batch (tokenizing rows, the teacher's targets), timed apart
        # from the steps, after the first batch has started the input pipeline.
        start = time.perf_counter()
        batches += [next(iterator) for _ in range(steps)]
        host_ms = (time.perf_counter() - start) * 1e3 / steps
        graphdef, tx, state = new_train_state(v, space, per_epoch * v.num_epochs)
        # The step training runs: the retriever's Trainer's own jitted program.
        trainer = make_trainer(graphdef, tx, v.seed, per_epoch * v.num_epochs, mesh)
        state = trainer.replicate(state)
        # Compile every row width first (the bucketed layout has one program per width).
        widths = {}
        for b in batches:
            widths.setdefault(b["inputs"].shape, b)
        for b in widths.values():
            state, _ = trainer.step(state, trainer.put(b))
        jax.block_until_ready(state)
        params = sum(x.size for x in jax.tree.leaves(state.params))
        runs[name] = {"trainer": trainer, "state": state, "batches": batches[1:], "ms": []}
        runs[name]["info"] = {
            "layout": v.layout,
            "arch": v.arch,
            "item_embed_buckets": v.item_embed_buckets,
            "ema_decay": v.ema_decay,
            "cooc_distill": v.cooc_distill,
            "host_ms_per_batch": host_ms,
            "layers": v.num_layers,
            "width": v.d_model,
            "params": int(params),
            "batch_size": v.batch_size,
            "row_tokens": int(max(b["inputs"].shape[1] for b in batches)),
            "widths": sorted({int(b["inputs"].shape[1]) for b in batches}),
            "steps_per_epoch": per_epoch,
            "non_pad_share": float(np.mean([(b["inputs"] != PAD).mean() for b in batches])),
            "tokens_per_step": float(np.mean([(b["inputs"] != PAD).sum() for b in batches])),
        }
        log(f"[bench-train] {name}: compiled, {params:,} parameters")
    for i in range(steps):
        for r in runs.values():
            batch = r["trainer"].put(r["batches"][i])
            start = time.perf_counter()
            r["state"], metrics = r["trainer"].step(r["state"], batch)
            jax.block_until_ready(metrics["loss"])
            r["ms"].append((time.perf_counter() - start) * 1e3)
    out = {"dataset": cfg.data.dataset, "split": split.name, "steps": steps, "variants": {}}
    for name, r in runs.items():
        info = r["info"]
        # An epoch's time is its steps' sum: the mean step (the bucketed layout's steps differ by
        # width, so their median is not the typical cost); tokens/s is over the same steps.
        mean = float(np.mean(r["ms"]))
        out["variants"][name] = {
            **info,
            "ms_per_step_median": float(np.median(r["ms"])),
            "ms_per_step_p90": float(np.percentile(r["ms"], 90)),
            "ms_per_step_mean": mean,
            "tokens_per_s": info["tokens_per_step"] / mean * 1e3,
            "epoch_seconds": info["steps_per_epoch"] * mean / 1e3,
        }
    out["backend"] = jax.default_backend()
    return out


def markdown(result: dict) -> str:
    lines = [
        f"{result['dataset']}, split {result['split']}, {result['steps']} timed steps each, "
        f"{result['backend']}",
        "",
        "| variant | parameters | rows x tokens | non-PAD share | steps/epoch | ms/step median "
        "(p90) | ms/step mean | host ms/batch | tokens/s | s/epoch |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, v in result["variants"].items():
        lines.append(
            f"| {name} | {v['params']:,} | {v['batch_size']} x {v['row_tokens']} | "
            f"{100 * v['non_pad_share']:.0f}% | {v['steps_per_epoch']} | "
            f"{v['ms_per_step_median']:.0f} ({v['ms_per_step_p90']:.0f}) | "
            f"{v['ms_per_step_mean']:.0f} | {v['host_ms_per_batch']:.1f} | "
            f"{v['tokens_per_s']:,.0f} | {v['epoch_seconds']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    common.positive("--steps", args.steps)
    if args.split == "cold" and args.cold_start is None:
        raise ArgumentError("--split cold needs --cold-start P")
    split = Split(args.split, args.cold_start)
    layout = common.layout_of(args)
    cfg = common.resolve_config(args, layout)
    result = bench_train(
        cfg,
        layout,
        split,
        args.layouts,
        args.sizes,
        args.steps,
        archs=args.archs,
        sweeps={sw.arg: getattr(args, sw.arg) for sw in SWEEPS},
    )
    table = markdown(result)
    path = layout.results / f"bench_train_{split.name}.json"
    atomic.write_json(path, result)
    atomic.write_text(path.with_suffix(".md"), table)
    print(table)
    print(json.dumps({"written": [str(path), str(path.with_suffix(".md"))]}))
    return 0

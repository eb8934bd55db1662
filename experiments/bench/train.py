"""Retriever training throughput: ms per step, non-PAD tokens per second and the time of one
epoch per example layout and model size, all variants' steps interleaved in one process."""

import dataclasses
import itertools
import time

import jax
import numpy as np

import rqvae
from experiments.evaluation.retrieval import load_inputs
from experiments.pipeline.artifacts import split_examples
from experiments.pipeline.layout import Split
from seqmodel import sharding
from seqmodel.state import new_train_state
from seqmodel.tokens import PAD, TokenSpace, sid_tokens
from seqmodel.train import make_trainer, training_batches


def _variants(cfg, layouts, sizes, archs=None, sweeps=()):
    """(name, SeqModelConfig) for every size x arch x swept option x layout; `sweeps` holds
    (SeqModelConfig field, label in a variant's name, its values or None: the config's alone)."""
    seq = cfg.seqmodel
    shapes = sizes or ((seq.num_layers, seq.d_model),)
    archs = archs or (seq.arch,)
    axes = [(field, label, values or (getattr(seq, field),)) for field, label, values in sweeps]
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
    sweeps=(),
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

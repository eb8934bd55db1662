"""Every PNG the project draws, behind one optional-matplotlib guard (the `plot` extra): loss
curves, tokenizer code usage, cold-start bars and latency sweeps. Without matplotlib each plot
function returns None and the run goes on."""

from pathlib import Path

import numpy as np

from data import atomic


def pyplot():  # -> the matplotlib.pyplot module, or None
    """matplotlib.pyplot on the Agg backend, or None where matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _save(fig, path: Path, **kwargs) -> Path:
    plt = pyplot()
    with atomic.atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", **kwargs)
    plt.close(fig)
    return Path(path)


def loss_curve(rows: list[dict], path: Path) -> Path | None:
    """Training loss per step and validation recall of a retriever's metrics rows, one PNG."""
    plt = pyplot()
    if plt is None:
        return None
    train = [(r["step"], r["loss"]) for r in rows if "loss" in r]
    evals = [(r["step"], v) for r in rows for k, v in r.items() if k.startswith("valid_recall")]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    if train:
        ax.plot(*zip(*train, strict=True), lw=0.8, label="train loss (nats/token)")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    if evals:
        ax2 = ax.twinx()
        ax2.plot(*zip(*evals, strict=True), "o-", color="C1", label="valid Recall@K")
        ax2.set_ylabel("valid Recall@K")
    fig.legend(loc="upper right")
    fig.tight_layout()
    return _save(fig, path)


def code_usage(codes: np.ndarray, vocab_size: int, path: Path) -> Path | None:
    """Items per code of a tokenizer, sorted, one curve per level."""
    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    for level in range(codes.shape[1]):
        counts = np.sort(np.bincount(codes[:, level], minlength=vocab_size))[::-1]
        used = int((counts > 0).sum())
        ax.plot(np.arange(len(counts)), counts, label=f"level {level + 1}: {used} codes used")
    ax.set_yscale("symlog", linthresh=1)
    ax.set_xlabel("code rank")
    ax.set_ylabel("items")
    ax.set_title(f"Code usage per level ({len(codes)} items)")
    ax.legend()
    fig.tight_layout()
    return _save(fig, path)


def cold_start_bars(
    results: list[dict], methods: tuple[str, ...], metric: str, label: str, path: Path
) -> Path | None:
    """One bar group per cold-start fraction, one bar per method; Recall@1 shown in percent."""
    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.5))
    width = 0.8 / len(methods)
    for i, method in enumerate(methods):
        vals = [r["methods"][method].get(metric, 0.0) or 0.0 for r in results]
        vals = [100 * v for v in vals] if metric == "recall@1" else vals
        xs = [j + i * width for j in range(len(results))]
        ax.bar(xs, vals, width, label=method)
        for x, v in zip(xs, vals, strict=True):
            ax.text(x, v, f"{v:.2f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks([j + width * (len(methods) - 1) / 2 for j in range(len(results))])
    ax.set_xticklabels([f"cold {r['cold_start_fraction']:g}" for r in results])
    ax.set_ylabel(label)
    ax.set_title(f"{results[0]['dataset']}: {label}" if results else label)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, path, dpi=110)


def latency_sweep(lines: dict, axis: str, path: Path) -> Path | None:
    """Median beam-search latency against N items or V codes, one line per method, log-log."""
    plt = pyplot()
    if plt is None or not lines:
        return None
    fig, ax = plt.subplots(figsize=(5.5, 3.6), dpi=80)
    for name, (xs, ys) in lines.items():
        ax.plot(xs, ys, marker="o", label=name)
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="N items" if axis == "items" else "V codes",
        ylabel="full beam search, median ms",
        title=f"constrained decoding vs {axis}",
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, path)

"""The code-usage plot of a tokenizer (needs the `plot` extra)."""

from pathlib import Path

import numpy as np
from jaxtyping import Int

from data import atomic


def plot_code_usage(codes: Int[np.ndarray, "N L"], vocab_size: int, path: Path) -> str | None:
    """Items per code, sorted, one curve per level; the file name, or None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    for level in range(codes.shape[1]):
        counts = np.sort(np.bincount(codes[:, level], minlength=vocab_size))[::-1]
        used = int((counts > 0).sum())
        ax.plot(np.arange(vocab_size), counts, label=f"level {level + 1}: {used}/{vocab_size} used")
    ax.set_yscale("symlog", linthresh=1)
    ax.set_xlabel("code rank")
    ax.set_ylabel("items")
    ax.set_title(f"Code usage per level ({len(codes)} items)")
    ax.legend()
    fig.tight_layout()
    with atomic.atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)
    return Path(path).name

"""Recall against training budget: test Recall@10 and NDCG@10 of the first k retrievers of a
leave-one-out pipeline as one ensemble (k = 1..n, n its retrievers: six for a `-long` preset), as a
percentage of TIGER's, one line per pipeline.

Usage: python docs/scripts/plot_budget.py OUT.png DATASET[/LABEL]=BUDGETDIR:WORKDIR ...
(DATASET names TIGER's numbers; LABEL, e.g. a pipeline seed, tells runs of one dataset apart)
e.g.   python docs/scripts/plot_budget.py docs/img/budget_long.png \\
           beauty=runs/beauty_budget:runs/beauty_long toys=runs/toys_budget:runs/toys_long \\
           sports=runs/sports_budget:runs/sports_long

Reads BUDGETDIR/k1.json, k2.json, ... as far as they go (written by docs/scripts/budget_evals.sh
WORKDIR BUDGETDIR) and WORKDIR/results/warm.json (k = n); writes nothing else. Prints the table it
plots.
"""

import json
import sys
from pathlib import Path

import numpy as np

from experiments.evaluation.plots import _save, pyplot
from experiments.evaluation.report import PAPER_WARM

METRICS = (("recall@10", "Recall@10"), ("ndcg@10", "NDCG@10"))
COLUMNS = ("recall@5", "ndcg@5", "recall@10", "ndcg@10")


def _runs(budget_dir: str, workdir: str) -> list[dict]:
    files = []
    while (Path(budget_dir) / f"k{len(files) + 1}.json").is_file():
        files.append(Path(budget_dir) / f"k{len(files) + 1}.json")
    files.append(Path(workdir) / "results" / "warm.json")
    if not files[-1].is_file():
        sys.exit(f"plot_budget: {files[-1]}: no such file (run the pipeline in {workdir} first)")
    runs = [json.loads(f.read_text()) for f in files]
    for k, run in enumerate(runs, 1):
        held = len(run.get("ensemble", [None]))
        if held != k:
            sys.exit(f"plot_budget: {files[k - 1]} holds {held} retrievers, not {k}")
    return runs


def _spec(spec: str) -> tuple[str, str, str, str]:
    """DATASET[/LABEL]=BUDGETDIR:WORKDIR as (its label, dataset, budget dir, work dir)."""
    name, _, dirs = spec.partition("=")
    dataset = name.partition("/")[0]
    if dataset not in PAPER_WARM:
        sys.exit(f"plot_budget: {spec}: dataset {dataset!r} is not one of {sorted(PAPER_WARM)}")
    budget_dir, _, workdir = dirs.partition(":")
    return name, dataset, budget_dir, workdir


def main(out: str, specs: list[str]) -> None:
    parsed = [_spec(spec) for spec in specs]
    plt = pyplot()
    if plt is None:
        sys.exit("plot_budget: needs matplotlib (pip install -e '.[plot]')")
    fig, axes = plt.subplots(1, len(METRICS), figsize=(10, 4), dpi=100, sharey=True)
    print("| dataset | k | R@5 | N@5 | R@10 | N@10 |")
    print("|---|---|---|---|---|---|")
    most = 1
    for name, dataset, budget_dir, workdir in parsed:
        runs = _runs(budget_dir, workdir)
        most = max(most, len(runs))
        tiger = PAPER_WARM[dataset]
        for i, run in enumerate(runs, 1):
            m = run["methods"]["static_all_items"]
            cells = " | ".join(f"{100 * m[x]:.2f}" for x in COLUMNS)
            print(f"| {name} | {i} | {cells} |")
        for ax, (metric, _) in zip(axes, METRICS, strict=True):
            y = [100 * r["methods"]["static_all_items"][metric] / tiger[metric] for r in runs]
            ax.plot(np.arange(1, len(runs) + 1), y, marker="o", label=name)
    for ax, (_, label) in zip(axes, METRICS, strict=True):
        ax.axhline(100, color="black", lw=1, ls="--")
        ax.set_title(f"{label}, % of TIGER (test)")
        ax.set_xticks(range(1, most + 1))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("% of TIGER's number")
    axes[0].legend()
    fig.suptitle("What each added retriever buys", fontsize=11)
    fig.supxlabel("retrievers in the ensemble (the pipeline's first k, by seed)", fontsize=10)
    fig.tight_layout()
    _save(fig, Path(out))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])

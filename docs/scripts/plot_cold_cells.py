"""The cold-start lead table as one figure: Recall@1 per cell and method, mean ± sd over the runs
given per dataset, with the STATIC paper's number beside.

Usage: python docs/scripts/plot_cold_cells.py OUT.png DATASET=WORKDIR[,WORKDIR...] ...
e.g.   python docs/scripts/plot_cold_cells.py docs/img/cold_start_cells.png \\
           beauty=runs/beauty_full,runs/beauty_s1,runs/beauty_s2 toys=runs/toys_full \\
           sports=runs/sports_cp

Reads each WORKDIR/results/cold_start_{0.02,0.05}.json (test split); writes nothing else.
"""

import json
import sys
from pathlib import Path

import numpy as np

from experiments.evaluation.plots import _save, pyplot
from experiments.evaluation.report import PAPER_COLD_START

METHODS = (
    ("static_content", "STATIC + content prior"),
    ("static", "STATIC (beam scores)"),
    ("static_plain", "STATIC (plain, paper's rule)"),
    ("content", "content neighbour"),
    ("random", "constrained random"),
)
FRACTIONS = (0.02, 0.05)


def main(out: str, specs: list[str]) -> None:
    plt = pyplot()
    if plt is None:
        sys.exit("plot_cold_cells: needs matplotlib (pip install -e '.[plot]')")
    cells, values = [], {m: [] for m, _ in METHODS}
    paper = []
    for spec in specs:
        dataset, _, dirs = spec.partition("=")
        for p in FRACTIONS:
            runs = [
                json.loads((Path(d) / "results" / f"cold_start_{p:g}.json").read_text())
                for d in dirs.split(",")
            ]
            cells.append(f"{dataset} {p:.0%}\n({len(runs)} run{'s' * (len(runs) > 1)})")
            for m, _ in METHODS:
                r = [100 * run["methods"][m]["recall@1"] for run in runs if m in run["methods"]]
                values[m].append((np.mean(r), np.std(r, ddof=1) if len(r) > 1 else 0.0))
            paper.append(100 * PAPER_COLD_START[dataset][p]["static"])
    fig, ax = plt.subplots(figsize=(11, 4.6), dpi=100)
    x = np.arange(len(cells))
    width = 0.8 / len(METHODS)
    for i, (m, label) in enumerate(METHODS):
        mean, sd = np.array(values[m]).T
        ax.bar(
            x + (i - (len(METHODS) - 1) / 2) * width, mean, width, yerr=sd, label=label, capsize=2
        )
    ax.scatter(x, paper, marker="_", s=900, color="black", zorder=3, label="STATIC paper (1B)")
    ax.set_xticks(x, cells)
    ax.set_ylabel("Recall@1 (%)")
    ax.set_title("Cold start, test split, beam 20 (bars: mean ± sd over the runs)")
    ax.legend(fontsize=8, ncol=6, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    _save(fig, Path(out))
    print(out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])

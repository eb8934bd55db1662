"""Toys and Games, leave-one-out: `beauty_single` (one item-level retriever, Beauty's settings)
on Toys.

Test R@5 / N@5 / R@10 / N@10 4.92 / 3.33 / 7.36 / 4.12 as the mean of `toys_item_cf`'s four
members of pipeline seed 0 ranked alone (RPG: 5.92 / 4.01 / 8.69 / 4.90), Intel Xeon, 19-20
minutes of training beside another; docs/RESULTS.md, rows e.
Command: `genret pipeline --dataset toys --config toys_single --workdir runs/toys_single`.
"""

from experiments.config import Config
from experiments.configs import beauty_item_cf, toys
from experiments.configs.beauty_single import one_retriever


def get_config() -> Config:
    return one_retriever(beauty_item_cf.collaborative(toys.get_config()), "toys_single")

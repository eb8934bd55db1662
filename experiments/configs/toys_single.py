"""Toys and Games, leave-one-out: `beauty_single` (one item-level retriever with a moving average
of its parameters, distilled from a teacher of its config; Beauty's settings) on Toys.

Test R@5 / N@5 / R@10 / N@10 4.96 / 3.31 / 7.47 / 4.12 over pipeline seeds 0-2 (RPG: 5.92 /
4.01 / 8.69 / 4.90), Intel Xeon, 27-32 minutes from an empty work directory (training loops
21-24); docs/RESULTS.md, rows e.
Command: `genret pipeline --dataset toys --config toys_single --workdir runs/toys_single`."""

from experiments.config import Config
from experiments.configs import beauty_item_cf, toys
from experiments.configs.beauty_single import one_retriever


def get_config() -> Config:
    return one_retriever(beauty_item_cf.collaborative(toys.get_config()), "toys_single")

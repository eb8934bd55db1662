"""Toys and Games, leave-one-out: `beauty_single` (one item-level retriever with a moving average
of its parameters, distilled from a teacher of its config; Beauty's settings) on Toys.

Test R@5 / N@5 / R@10 / N@10 4.99 / 3.33 / 7.52 / 4.15 at pipeline seed 0 (RPG: 5.92 / 4.01 /
8.69 / 4.90), Intel Xeon, about 32 minutes (teacher and student timed apart; training loops
24); docs/RESULTS.md, rows e.
Command: `genret pipeline --dataset toys --config toys_single --workdir runs/toys_single`."""

from experiments.config import Config
from experiments.configs import beauty_item_cf, toys
from experiments.configs.beauty_single import one_retriever


def get_config() -> Config:
    return one_retriever(beauty_item_cf.collaborative(toys.get_config()), "toys_single")

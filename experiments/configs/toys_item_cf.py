"""Toys, leave-one-out: `beauty_item_cf`'s settings (run untuned), four retrievers as one ensemble.

Command: `genret pipeline --dataset toys --config toys_item_cf --workdir runs/toys_item_cf`.
Test R@5 / N@5 / R@10 / N@10 5.57 / 3.78 / 8.20 / 4.63 at pipeline seed 0, three-seed mean 5.62 /
3.82 / 8.27 / 4.67 (TIGER: 5.21 / 3.71 / 7.12 / 4.32), AMD EPYC with AVX-512, about 42 minutes of
training on 2 cores.
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty_item_cf, toys


def get_config() -> Config:
    return dataclasses.replace(beauty_item_cf.collaborative(toys.get_config()), name="toys_item_cf")

"""Toys with `beauty_item_cf`'s settings (chosen on Beauty's validation split only; run untuned).

Command: as `beauty_item_cf`'s, with `--dataset toys --config toys_item_cf`. Session 10: 20 minutes
of training (30 epochs, best at 29); test Recall@5 / NDCG@5 / Recall@10 / NDCG@10 3.93 / 2.68 /
5.99 / 3.35% (TIGER: 5.21 / 3.71 / 7.12 / 4.32). The 2-core CPU was shared with one other training.
docs/RESULTS.md, lead tables.
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty_item_cf, toys


def get_config() -> Config:
    return dataclasses.replace(beauty_item_cf.collaborative(toys.get_config()), name="toys_item_cf")

"""Toys with `beauty_item_cf`'s settings (chosen on Beauty's validation split only; run untuned).

Command: as `beauty_item_cf`'s, with `--dataset toys --config toys_item_cf`. Session 9:
30 minutes of training, test Recall@5 / NDCG@5 / Recall@10 / NDCG@10 3.70 / 2.49 / 5.62 / 3.10%
(TIGER: 5.21 / 3.71 / 7.12 / 4.32); docs/RESULTS.md, lead tables.
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty_item_cf, toys


def get_config() -> Config:
    return dataclasses.replace(beauty_item_cf.collaborative(toys.get_config()), name="toys_item_cf")

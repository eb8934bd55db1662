"""Toys with `beauty_item_cf`'s settings (chosen on Beauty's validation split only; run untuned).

Command: `genret pipeline --dataset toys --config toys_item_cf --workdir W` (retriever seeds 0, 1, 2
as one ensemble, as `beauty_item_cf`). Session 11: test Recall@5 / NDCG@5 / Recall@10 / NDCG@10
4.87 / 3.32 / 7.04 / 4.02% (TIGER: 5.21 / 3.71 / 7.12 / 4.32); seed 0 alone (session 10) 3.93 /
2.68 / 5.99 / 3.35%. docs/RESULTS.md, lead tables.
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty_item_cf, toys


def get_config() -> Config:
    return dataclasses.replace(beauty_item_cf.collaborative(toys.get_config()), name="toys_item_cf")

"""Toys with `beauty_item`'s settings (chosen on Beauty's validation split; run untuned).

Command: `genret train-retriever --workdir runs/toys --split loo --config toys_item`.
Test Recall@5 / NDCG@5 / Recall@10 / NDCG@10 3.21 / 2.14 / 4.83 / 2.66 at seed 0 (TIGER: 5.21 /
3.71 / 7.12 / 4.32); 20.7 minutes of training on a shared 2-core CPU.
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty_item, toys


def get_config() -> Config:
    return dataclasses.replace(beauty_item.item_retriever(toys.get_config()), name="toys_item")

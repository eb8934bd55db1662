"""Toys with `beauty_item`'s settings (chosen on Beauty's validation split only; run untuned).

Command: `genret train-retriever --workdir runs/toys --split loo --config toys_item`. Session 8:
20.7 minutes of training on the shared CPU, test Recall@5 / NDCG@5 / Recall@10 / NDCG@10 3.21 /
2.14 / 4.83 / 2.66% (TIGER: 5.21 / 3.71 / 7.12 / 4.32).
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty_item, toys


def get_config() -> Config:
    return dataclasses.replace(beauty_item.item_retriever(toys.get_config()), name="toys_item")

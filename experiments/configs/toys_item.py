"""Toys with `beauty_item`'s settings (chosen on Beauty's validation split only; run untuned).

Command: `genret train-retriever --workdir runs/toys --split loo --config toys_item`
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty_item, toys


def get_config() -> Config:
    return dataclasses.replace(beauty_item.item_retriever(toys.get_config()), name="toys_item")

"""Toys with `beauty_4x128`'s settings (chosen on Beauty's validation split; run untuned).

Command: `genret train-retriever --workdir runs/toys --split loo --config toys_4x128`.
No result recorded: it gives the token-level 4 x D128 retriever on Toys, beside `toys_item`.
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty_4x128, toys


def get_config() -> Config:
    cfg = beauty_4x128.larger_retriever(toys.get_config())
    return dataclasses.replace(cfg, name="toys_4x128")

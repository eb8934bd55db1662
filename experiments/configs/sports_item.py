"""Sports with `beauty_item`'s settings (chosen on Beauty's validation split only; run untuned).

Command: `genret train-retriever --workdir runs/sports --split loo --config sports_item`
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty_item, sports


def get_config() -> Config:
    return dataclasses.replace(beauty_item.item_retriever(sports.get_config()), name="sports_item")

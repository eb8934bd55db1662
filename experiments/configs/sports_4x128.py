"""Sports with `beauty_4x128`'s settings (chosen on Beauty's validation split; run untuned).

Command: `genret train-retriever --workdir runs/sports --split loo --config sports_4x128`.
No result recorded: it gives the token-level 4 x D128 retriever on Sports, beside `sports_item`.
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty_4x128, sports


def get_config() -> Config:
    cfg = beauty_4x128.larger_retriever(sports.get_config())
    return dataclasses.replace(cfg, name="sports_4x128")

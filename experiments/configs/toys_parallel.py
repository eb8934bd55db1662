"""Toys and Games, leave-one-out (TIGER's protocol): one parallel-codes retriever (RPG).

`beauty_parallel` with RPG's 16 codes per item on Toys (8 PCA dimensions per code). Untuned
defaults, not yet measured.
Command: `genret pipeline --dataset toys --config toys_parallel --workdir runs/toys_parallel`.
"""

from data.config import DataConfig
from experiments.config import Config
from experiments.configs.beauty_parallel import parallel_only


def get_config() -> Config:
    cfg = Config(name="toys_parallel", data=DataConfig(dataset="toys"))
    return parallel_only(cfg, num_codes=16, eval_every=75)  # 19,412 users / batch 256

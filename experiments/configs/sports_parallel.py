"""Sports and Outdoors, leave-one-out (TIGER's protocol): one parallel-codes retriever (RPG).

`beauty_parallel` with RPG's 16 codes per item on Sports (8 PCA dimensions per code). Untuned
defaults, not yet measured.
Command: `genret pipeline --dataset sports --config sports_parallel --workdir runs/sports_parallel`.
"""

from data.config import DataConfig
from experiments.config import Config
from experiments.configs.beauty_parallel import parallel_only


def get_config() -> Config:
    cfg = Config(name="sports_parallel", data=DataConfig(dataset="sports"))
    return parallel_only(cfg, num_codes=16, eval_every=139)  # 35,598 users / batch 256

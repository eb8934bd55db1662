"""Sports and Outdoors, leave-one-out (TIGER's protocol): one parallel-codes retriever (RPG).

`beauty_single` with RPG's 16 codes per item on Sports (8 PCA dimensions per code). Untuned
defaults, not yet measured.
Command: `genret pipeline --dataset sports --config sports_single --workdir runs/sports_single`.
"""

from data.config import DataConfig
from experiments.config import Config
from experiments.configs.beauty_single import single


def get_config() -> Config:
    cfg = Config(name="sports_single", data=DataConfig(dataset="sports"))
    return single(cfg, num_codes=16, eval_every=139)  # 35,598 users / batch 256

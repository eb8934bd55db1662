"""Sports with `beauty_item`'s settings (chosen on Beauty's validation split; run untuned).

Command: `genret train-retriever --workdir runs/sports --split loo --config sports_item`.
Test Recall@5 / NDCG@5 / Recall@10 / NDCG@10 1.56 / 1.01 / 2.52 / 1.32 at seed 0 (TIGER: 2.64 /
1.81 / 4.00 / 2.25); 35.2 minutes of training on a 2-core CPU shared with two other jobs.
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty_item, sports


def get_config() -> Config:
    return dataclasses.replace(beauty_item.item_retriever(sports.get_config()), name="sports_item")

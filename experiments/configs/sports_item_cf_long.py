"""Sports, leave-one-out past the 60-minute budget: `sports_item_cf` with four retrievers (0-3).

Four, not Beauty's and Toys' six: on Sports four already take 75-88 minutes of training.
Command: `genret pipeline --dataset sports --config sports_item_cf_long --workdir runs/sports_long`.
Not measured at batch 64. At batch 128 it gave test R@5 / N@5 / R@10 / N@10 2.92 / 1.90 / 4.53 /
2.42 at pipeline seed 0, three-seed mean 2.88 / 1.87 / 4.50 / 2.39 (TIGER: 2.64 / 1.81 / 4.00 /
2.25), 75-88 minutes of training on a quiet 2-core CPU.
"""

from experiments.config import Config
from experiments.configs import beauty_item_cf_long, sports_item_cf


def get_config() -> Config:
    return beauty_item_cf_long.long_recipe(sports_item_cf.get_config(), retrievers=4)

"""Toys, leave-one-out past the 60-minute budget: `toys_item_cf` with six retrievers (0-5).

Command: `genret pipeline --dataset toys --config toys_item_cf_long --workdir runs/toys_long`.
Not measured at batch 64. At batch 128 with checkpoints chosen on 1,000 validation users it gave
test R@5 / N@5 / R@10 / N@10 5.22 / 3.53 / 7.97 / 4.41 at pipeline seed 0 (TIGER: 5.21 / 3.71 /
7.12 / 4.32), 64 minutes of training on a quiet 2-core CPU.
"""

from experiments.config import Config
from experiments.configs import beauty_item_cf_long, toys_item_cf


def get_config() -> Config:
    return beauty_item_cf_long.long_recipe(toys_item_cf.get_config())

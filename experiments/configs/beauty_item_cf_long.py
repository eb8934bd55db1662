"""Beauty, leave-one-out past the 60-minute budget: `beauty_item_cf` with six retrievers.

Seeds 0-5 ranked as one ensemble instead of 0-3; everything else is `beauty_item_cf`'s.
Command: `genret pipeline --dataset beauty --config beauty_item_cf_long --workdir runs/beauty_long`.
Not measured at batch 64. At batch 128 with checkpoints chosen on 1,000 validation users it gave
test R@5 / N@5 / R@10 / N@10 5.26 / 3.60 / 8.02 / 4.49 at pipeline seed 0 (TIGER: 4.54 / 3.21 /
6.48 / 3.84), about 80 minutes of training on a quiet 2-core CPU.
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty_item_cf


def long_recipe(cfg: Config, retrievers: int = 6) -> Config:
    """`cfg` (a `*_item_cf` preset) with seeds 0..retrievers-1 as one ensemble, named `*_long`."""
    return dataclasses.replace(
        cfg,
        name=f"{cfg.name}_long",
        eval=dataclasses.replace(cfg.eval, warm_ensemble_seeds=tuple(range(1, retrievers))),
    )


def get_config() -> Config:
    return long_recipe(beauty_item_cf.get_config())

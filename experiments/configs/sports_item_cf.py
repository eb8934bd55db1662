"""Sports, leave-one-out: `beauty_item_cf`'s settings (run untuned) with two retrievers, not four.

Two (seeds 0 and 1) are the most that train within 60 minutes on 2 cores on Sports, whose
retrievers run more steps; `sports_item_cf_long` trains four.
Command: `genret pipeline --dataset sports --config sports_item_cf --workdir runs/sports_item_cf`.
Test R@5 / N@5 / R@10 / N@10 2.79 / 1.85 / 4.36 / 2.35 at pipeline seed 0, three-seed mean 2.81 /
1.84 / 4.40 / 2.35 (TIGER: 2.64 / 1.81 / 4.00 / 2.25), AMD EPYC with AVX-512, about 39 minutes of
training on 2 cores.
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty_item_cf, sports


def get_config() -> Config:
    cfg = beauty_item_cf.collaborative(sports.get_config())
    return dataclasses.replace(
        cfg,
        name="sports_item_cf",
        eval=dataclasses.replace(cfg.eval, warm_ensemble_seeds=(1,)),
    )

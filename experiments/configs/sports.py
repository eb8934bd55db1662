"""Amazon Reviews 2014 Sports_and_Outdoors 5-core: `beauty`'s settings, run untuned.

STATIC's cold-start protocol as in `beauty`; leave-one-out runs as `sports_item_cf` in WORKDIR/loo.
Command: `genret pipeline --dataset sports --config sports --workdir runs/sports`.
Test Recall@1 at 2% / 5% cold items, three-seed mean (seed 0): STATIC + content prior 4.32 / 1.94
(4.18 / 1.91), the hybrid 4.89 / 2.57, the content neighbour 4.83 / 2.57 (STATIC's paper: 1.24 /
1.17), 2-core Intel Xeon, jax 0.12.0.1; leave-one-out: `sports_item_cf`'s.
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty


def get_config() -> Config:
    cfg = beauty.get_config()
    return dataclasses.replace(
        cfg,
        name="sports",
        data=dataclasses.replace(cfg.data, dataset="sports"),
        eval=dataclasses.replace(cfg.eval, warm_preset="sports_item_cf"),
    )

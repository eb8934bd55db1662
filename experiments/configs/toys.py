"""Amazon Reviews 2014 Toys_and_Games 5-core: `beauty`'s settings, run untuned.

STATIC's cold-start protocol as in `beauty`; leave-one-out runs as `toys_item_cf` in WORKDIR/loo.
Command: `genret pipeline --dataset toys --config toys --workdir runs/toys`.
Test Recall@1 at 2% / 5% cold items, three-seed mean (seed 0): STATIC + content prior 8.38 / 4.92
(8.47 / 4.93), the hybrid 8.73 / 5.25, the content neighbour 8.80 / 5.31 (STATIC's paper: 4.39 /
2.25), 2-core Intel Xeon, jax 0.12.0.1; leave-one-out: `toys_item_cf`'s.
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty


def get_config() -> Config:
    cfg = beauty.get_config()
    return dataclasses.replace(
        cfg,
        name="toys",
        data=dataclasses.replace(cfg.data, dataset="toys"),
        eval=dataclasses.replace(cfg.eval, warm_preset="toys_item_cf"),
    )

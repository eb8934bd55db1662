"""Amazon Reviews 2014 Toys_and_Games 5-core, the STATIC cold-start protocol, with leave-one-out as
the `toys_item_cf` preset in WORKDIR/loo (`eval.warm_preset`).

Beauty's settings, tuned on Beauty's validation split only; this dataset is run untuned.

Command: `genret pipeline --dataset toys --workdir runs/toys`
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

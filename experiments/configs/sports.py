"""Amazon Reviews 2014 Sports_and_Outdoors 5-core, the STATIC cold-start protocol, with
leave-one-out as the `sports_item_cf` preset in WORKDIR/loo (`eval.warm_preset`).

Beauty's settings, tuned on Beauty's validation split only; this dataset is run untuned.

Command: `genret pipeline --dataset sports --workdir runs/sports`
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

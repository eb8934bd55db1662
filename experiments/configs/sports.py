"""Amazon Reviews 2014 Sports_and_Outdoors 5-core: `beauty`'s settings, run untuned.

STATIC's cold-start protocol as in `beauty`; leave-one-out runs as `sports_item_cf` in WORKDIR/loo.
Command: `genret pipeline --dataset sports --config sports --workdir runs/sports`.
Test STATIC + content prior Recall@1 at 2% / 5% cold items: 4.00 / 2.31 at pipeline seed 0,
three-seed mean 3.99 / 2.31 (STATIC's paper: 1.24 / 1.17), AMD EPYC with AVX-512; leave-one-out:
`sports_item_cf`'s.
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

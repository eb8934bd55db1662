"""Amazon Reviews 2014 Toys_and_Games 5-core: `beauty`'s settings, run untuned.

STATIC's cold-start protocol as in `beauty`; leave-one-out runs as `toys_item_cf` in WORKDIR/loo.
Command: `genret pipeline --dataset toys --config toys --workdir runs/toys`.
Test STATIC + content prior Recall@1 at 2% / 5% cold items: 7.88 / 4.90 at pipeline seed 0,
three-seed mean 7.75 / 4.97 (STATIC's paper: 4.39 / 2.25), AMD EPYC with AVX-512; leave-one-out:
`toys_item_cf`'s.
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

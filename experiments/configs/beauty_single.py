"""Beauty, leave-one-out (TIGER's protocol): one item-level retriever alone, no ensemble.

`beauty_item_cf`'s tokenizer and retriever (seed 0) without its three other members: beams ranked
by this retriever's log-probabilities only (`static_all_items`; the co-occurrence hybrid beside it
is reported, never its number). Test R@5 / N@5 / R@10 / N@10 4.84 / 3.35 / 7.26 / 4.13 as the
mean of the four members of pipeline seed 0 ranked alone (RPG: 5.50 / 3.81 / 8.09 / 4.64), Intel
Xeon, 35-37 minutes of training beside another; docs/RESULTS.md, rows e.
Command: `genret pipeline --dataset beauty --config beauty_single --workdir runs/beauty_single`.
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty, beauty_item_cf


def one_retriever(cfg: Config, name: str) -> Config:
    """`cfg`, a dataset's `D_item_cf` preset, with its first retriever alone."""
    ev = dataclasses.replace(cfg.eval, warm_ensemble_seeds=())
    return dataclasses.replace(cfg, name=name, eval=ev)


def get_config() -> Config:
    return one_retriever(beauty_item_cf.collaborative(beauty.get_config()), "beauty_single")

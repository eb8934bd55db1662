"""Beauty, leave-one-out (TIGER's protocol): one item-level retriever alone, no ensemble.

`beauty_item_cf`'s tokenizer and first retriever (seed 0) without its three other members, with a
moving average of the retriever's parameters, distilled from a teacher of the same config that the
pipeline trains first (both chosen on Beauty's validation split): beams ranked by this retriever's
log-probabilities only (`static_all_items`; the co-occurrence hybrid beside it is reported, never
its number). Test R@5 / N@5 / R@10 / N@10 5.08 / 3.46 / 7.62 / 4.27, the mean of pipeline seeds
0-2 (RPG: 5.50 / 3.81 / 8.09 / 4.64), Intel Xeon, about 34 minutes, teacher and student timed
apart (training loops about 28); docs/RESULTS.md, rows e.
Command: `genret pipeline --dataset beauty --config beauty_single --workdir runs/beauty_single`."""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty, beauty_item_cf


def one_retriever(cfg: Config, name: str) -> Config:
    """`cfg`, a dataset's `D_item_cf` preset, with its first retriever alone, validated, chosen
    and decoded with a moving average of its parameters (`seqmodel.ema_decay=0.999`), and
    distilled from a teacher of the same config trained first (`seqmodel.self_distill=0.5`): each
    lifts one retriever on Beauty's validation split."""
    ev = dataclasses.replace(cfg.eval, warm_ensemble_seeds=())
    sm = dataclasses.replace(cfg.seqmodel, ema_decay=0.999, self_distill=0.5)
    return dataclasses.replace(cfg, name=name, eval=ev, seqmodel=sm)


def get_config() -> Config:
    return one_retriever(beauty_item_cf.collaborative(beauty.get_config()), "beauty_single")

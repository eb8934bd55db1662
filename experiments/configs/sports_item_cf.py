"""Sports with `beauty_item_cf`'s settings (chosen on Beauty's validation split only; run untuned).

Command: as `beauty_item_cf`'s, with `--dataset sports --config sports_item_cf`. Session 10: 25
minutes of training (early stop in epoch 20, best at 14); test Recall@5 / NDCG@5 / Recall@10 /
NDCG@10 2.48 / 1.58 / 3.76 / 1.99% (TIGER: 2.64 / 1.81 / 4.00 / 2.25). The 2-core CPU was shared
with one other training. docs/RESULTS.md, lead tables.
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty_item_cf, sports


def get_config() -> Config:
    return dataclasses.replace(
        beauty_item_cf.collaborative(sports.get_config()), name="sports_item_cf"
    )

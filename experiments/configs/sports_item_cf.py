"""Sports with `beauty_item_cf`'s settings (chosen on Beauty's validation split only; run untuned).

Command: as `beauty_item_cf`'s, with `--dataset sports --config sports_item_cf`. Session 9:
22.6 minutes of training (early stop in epoch 12), test Recall@5 / NDCG@5 / Recall@10 / NDCG@10
1.98 / 1.23 / 3.18 / 1.61% (TIGER: 2.64 / 1.81 / 4.00 / 2.25); docs/RESULTS.md, lead tables.
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty_item_cf, sports


def get_config() -> Config:
    return dataclasses.replace(
        beauty_item_cf.collaborative(sports.get_config()), name="sports_item_cf"
    )

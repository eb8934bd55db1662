"""Sports with `beauty_item_cf`'s settings (chosen on Beauty's validation split only; run untuned).

Command: `genret pipeline --dataset sports --config sports_item_cf --workdir W` (retriever seeds 0,
1, 2 as one ensemble, as `beauty_item_cf`). Session 11: test Recall@5 / NDCG@5 / Recall@10 /
NDCG@10 2.57 / 1.65 / 4.13 / 2.16% (TIGER: 2.64 / 1.81 / 4.00 / 2.25); seed 0 alone (session 10)
2.48 / 1.58 / 3.76 / 1.99%. docs/RESULTS.md, lead tables.
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty_item_cf, sports


def get_config() -> Config:
    return dataclasses.replace(
        beauty_item_cf.collaborative(sports.get_config()), name="sports_item_cf"
    )

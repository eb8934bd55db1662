"""Sports with `beauty_item_cf`'s settings (chosen on Beauty's validation split only; run untuned).

Command: `genret pipeline --dataset sports --config sports_item_cf --workdir W` (four retrievers of
dropout 0.3 with the co-occurrence teacher, seeds 0-3, as one ensemble, as `beauty_item_cf` since
session 26). Test Recall@5 / NDCG@5 / Recall@10 / NDCG@10 2.63 / 1.68 / 4.08 / 2.15% (TIGER: 2.64 /
1.81 / 4.00 / 2.25); the three dropout-0.2 retrievers before session 26: 2.57 / 1.65 / 4.13 / 2.16%.
docs/RESULTS.md, lead tables.
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty_item_cf, sports


def get_config() -> Config:
    return dataclasses.replace(
        beauty_item_cf.collaborative(sports.get_config()), name="sports_item_cf"
    )

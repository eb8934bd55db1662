"""Toys with `beauty_item_cf`'s settings (chosen on Beauty's validation split only; run untuned).

Command: `genret pipeline --dataset toys --config toys_item_cf --workdir W` (four retrievers of
dropout 0.3 with the co-occurrence teacher, seeds 0-3, as one ensemble, as `beauty_item_cf` since
session 26; checkpoints chosen on 10,000 validation users since session 42; batch 64 since session
60). Test Recall@5 / NDCG@5 / Recall@10 / NDCG@10 5.57 / 3.78 / 8.20 / 4.63% (session 58, AMD EPYC
with AVX-512, and again to the digit from an empty work directory in session 62; TIGER: 5.21 /
3.71 / 7.12 / 4.32); over pipeline seeds 0, 1, 2 (sessions 58-59)
5.62 ± 0.18 / 3.82 ± 0.14 / 8.27 ± 0.06 / 4.67 ± 0.08%. At batch 128: 5.24 / 3.59 / 7.85 / 4.43%
(session 40, Intel), 5.28 ± 0.04 / 3.53 ± 0.06 / 7.93 ± 0.15 / 4.38 ± 0.06% over the three seeds;
with the 1,000-user holdout 5.23 / 3.56 / 7.85 / 4.41%; the three dropout-0.2 retrievers before
session 26: 4.87 / 3.32 / 7.04 / 4.02%.
docs/RESULTS.md, lead tables.
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty_item_cf, toys


def get_config() -> Config:
    return dataclasses.replace(beauty_item_cf.collaborative(toys.get_config()), name="toys_item_cf")

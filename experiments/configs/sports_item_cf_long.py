"""Sports past the 60-minute budget: `sports_item_cf` with four retrievers (seeds 0-3) as one
ensemble instead of two, Beauty's in-budget ensemble (issue 17, deliverable 2's `-long` preset).

Beauty's and Toys' `-long` presets train six; on Sports four already take 75-88 minutes of loops
on the 2-core CPU with checkpoints chosen on 10,000 validation users, and four are what was
measured over Sports' three pipeline seeds (session 42, runs/logs/s42_rules.txt R6).
Test Recall@5 / NDCG@5 / Recall@10 / NDCG@10 over pipeline seeds 0, 1, 2: 2.88 ± 0.06 / 1.87 ±
0.05 / 4.50 ± 0.09 / 2.39 ± 0.06% (TIGER: 2.64 / 1.81 / 4.00 / 2.25); seed 0: 2.92 / 1.90 / 4.53 /
2.42%. Six retrievers with the 1,000-user holdout (session 22) gave 2.59 / 1.66 / 4.06 / 2.14%.
Since session 60 its retrievers train at batch 64, as `sports_item_cf`'s (not measured with four;
the numbers above are batch 128's).
Command: `genret pipeline --dataset sports --config sports_item_cf_long --workdir W`.
docs/RESULTS.md.
"""

from experiments.config import Config
from experiments.configs import beauty_item_cf_long, sports_item_cf


def get_config() -> Config:
    return beauty_item_cf_long.long_recipe(sports_item_cf.get_config(), retrievers=4)

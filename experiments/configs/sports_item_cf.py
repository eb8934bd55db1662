"""Sports with `beauty_item_cf`'s settings (chosen on Beauty's validation split only; run untuned),
with two retrievers instead of four: the most that train in 60 minutes on the 2-core CPU.

Command: `genret pipeline --dataset sports --config sports_item_cf --workdir W` (two retrievers of
dropout 0.3 with the co-occurrence teacher, seeds 0 and 1, as one ensemble; each chooses its
checkpoint on 10,000 validation users since session 42). Four, Beauty's ensemble, run past the
budget as `sports_item_cf_long`.

Session 42 (runs/logs/s42_rules.txt, R6; fixed before pipeline seed 2's numbers were read): on
10,000 validation users Sports' retrievers run 5,600-8,250 steps (on 1,000, 7 of 8 had stopped
early), so four take 75-88 minutes of loops on the quiet CPU and two 41-47. By session 38's rule
R5 (as many retrievers as fit 60 minutes, fixed before any ranking) the preset is two.
Session 60: batch 64, as `beauty_item_cf` (its two loops 39.1 and 40.3 minutes on the AMD EPYC
with AVX-512 at pipeline seeds 0 and 1). Test Recall@5 / NDCG@5 / Recall@10 / NDCG@10, seed 0:
2.79 / 1.85 / 4.36 / 2.35% (session 58; TIGER: 2.64 / 1.81 / 4.00 / 2.25); seed 1: 2.74 / 1.79 /
4.36 / 2.31% (sessions 59-60; NDCG@5 under TIGER's); seed 2, run after the change
(runs/logs/s60_rules.txt, R5): 2.90 / 1.88 / 4.48 / 2.39%. Over seeds 0, 1, 2: 2.81 ± 0.08 /
1.84 ± 0.05 / 4.40 ± 0.07 / 2.35 ± 0.04%, above TIGER's four as a mean.
At batch 128 over pipeline seeds 0, 1, 2 (sessions 38, 41, 42): 2.83 ± 0.03 / 1.83 ± 0.02 / 4.46 ±
0.02 / 2.35 ± 0.02%; seed 0: 2.83 / 1.81 / 4.45 / 2.34%. Before session 42 (four retrievers,
1,000-user holdout) seed 0 gave 2.63 / 1.68 / 4.08 / 2.15% and the three seeds 2.54 / 1.63 / 4.03 /
2.11%.
docs/RESULTS.md, lead tables; training time in docs/BENCHMARKS.md.
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty_item_cf, sports


def get_config() -> Config:
    cfg = beauty_item_cf.collaborative(sports.get_config())
    return dataclasses.replace(
        cfg,
        name="sports_item_cf",
        eval=dataclasses.replace(cfg.eval, warm_ensemble_seeds=(1,)),
    )

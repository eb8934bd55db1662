"""Toys with `beauty_item_cf_long`'s settings (chosen on Beauty's validation split only;
run untuned).

`toys_item_cf` (dropout 0.3 and the co-occurrence teacher since session 26) with six
retriever seeds as one ensemble instead of four: issue 17's `-long` preset, past the
60-minute budget. Batch 64 since session 60, as `toys_item_cf` (six not measured at batch 64).
Command: `genret pipeline --dataset toys --config toys_item_cf_long --workdir W`.
docs/RESULTS.md.
"""

from experiments.config import Config
from experiments.configs import beauty_item_cf_long, toys_item_cf


def get_config() -> Config:
    return beauty_item_cf_long.long_recipe(toys_item_cf.get_config())

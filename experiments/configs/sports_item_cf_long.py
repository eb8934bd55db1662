"""Sports with `beauty_item_cf_long`'s settings (chosen on Beauty's validation split only;
run untuned).

`sports_item_cf` (dropout 0.3 and the co-occurrence teacher since session 26) with six
retriever seeds as one ensemble instead of four: issue 17's `-long` preset, past the
60-minute budget.
Command: `genret pipeline --dataset sports --config sports_item_cf_long --workdir W`.
docs/RESULTS.md.
"""

from experiments.config import Config
from experiments.configs import beauty_item_cf_long, sports_item_cf


def get_config() -> Config:
    return beauty_item_cf_long.long_recipe(sports_item_cf.get_config())

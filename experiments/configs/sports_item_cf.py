"""Sports with `beauty_item_cf`'s settings (chosen on Beauty's validation split only; run untuned).

Command: as `beauty_item_cf`'s, with `--dataset sports --config sports_item_cf`. Numbers:
docs/RESULTS.md, lead tables.
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty_item_cf, sports


def get_config() -> Config:
    return dataclasses.replace(
        beauty_item_cf.collaborative(sports.get_config()), name="sports_item_cf"
    )

"""Toys with `beauty_item_cf`'s settings (chosen on Beauty's validation split only; run untuned).

Command: as `beauty_item_cf`'s, with `--dataset toys --config toys_item_cf`. Numbers:
docs/RESULTS.md, lead tables.
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty_item_cf, toys


def get_config() -> Config:
    return dataclasses.replace(beauty_item_cf.collaborative(toys.get_config()), name="toys_item_cf")

"""Tiny shapes for tests: a few hundred synthetic items, seconds per stage."""

import dataclasses

from data.config import SyntheticConfig
from experiments.config import Config


def get_config() -> Config:
    cfg = Config(name="tiny")
    data = dataclasses.replace(
        cfg.data, synthetic=SyntheticConfig(num_items=300, num_users=400, num_categories=6)
    )
    return dataclasses.replace(cfg, data=data)

"""Amazon Reviews 2014 Toys_and_Games 5-core, the STATIC cold-start protocol.

Command: `genret pipeline --dataset toys --workdir runs/toys`
"""

import dataclasses

from experiments.config import Config


def get_config() -> Config:
    cfg = Config(name="toys")
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, dataset="toys"))

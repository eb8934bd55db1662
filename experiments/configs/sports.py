"""Amazon Reviews 2014 Sports_and_Outdoors 5-core, the STATIC cold-start protocol.

Command: `genret pipeline --dataset sports --workdir runs/sports`
"""

import dataclasses

from experiments.config import Config


def get_config() -> Config:
    cfg = Config(name="sports")
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, dataset="sports"))

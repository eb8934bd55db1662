"""Amazon Reviews 2014 Beauty 5-core, the STATIC cold-start protocol.

Command: `genret pipeline --dataset beauty --workdir runs/beauty`
"""

import dataclasses

from experiments.config import Config


def get_config() -> Config:
    cfg = Config(name="beauty")
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, dataset="beauty"))

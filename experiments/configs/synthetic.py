"""The embedded default: the synthetic catalog, small enough for CPU.

Command: `genret pipeline --dataset synthetic --workdir runs/synthetic`
"""

from experiments.config import Config


def get_config() -> Config:
    return Config(name="synthetic")

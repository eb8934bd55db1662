"""The embedded default: the synthetic catalog, small enough for CPU.

Command: `genret pipeline --dataset synthetic --workdir runs/synthetic`
"""

import dataclasses

from experiments.config import Config


def get_config() -> Config:
    cfg = Config(name="synthetic")
    seqmodel = dataclasses.replace(
        cfg.seqmodel, num_layers=2, d_model=64, num_heads=2, mlp_dim=128, num_epochs=5
    )
    return dataclasses.replace(cfg, seqmodel=seqmodel)

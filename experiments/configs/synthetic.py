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
    # A seeded sample of 3,000 leave-one-out test users keeps the pipeline within 10 minutes.
    evaluation = dataclasses.replace(cfg.eval, max_test_users=3000)
    return dataclasses.replace(cfg, seqmodel=seqmodel, eval=evaluation)

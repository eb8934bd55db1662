"""Tiny shapes for tests: a few hundred synthetic items, seconds per stage."""

import dataclasses

from data.config import SyntheticConfig
from experiments.config import Config


def get_config() -> Config:
    cfg = Config(name="tiny")
    data = dataclasses.replace(
        cfg.data, synthetic=SyntheticConfig(num_items=300, num_users=400, num_categories=6)
    )
    rqvae = dataclasses.replace(
        cfg.rqvae,
        embed_dim=32,
        codebook_size=16,
        latent_dim=8,
        hidden_dims=(64,),
        batch_size=64,
        num_steps=200,
        checkpoint_every=100,
    )
    return dataclasses.replace(cfg, data=data, rqvae=rqvae)

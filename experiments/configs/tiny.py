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
    seqmodel = dataclasses.replace(
        cfg.seqmodel,
        num_layers=1,
        d_model=16,
        num_heads=2,
        mlp_dim=32,
        max_history=5,
        batch_size=16,
        num_epochs=2,
        eval_every=10,
        eval_users=20,
        eval_beam_size=4,
    )
    return dataclasses.replace(cfg, data=data, rqvae=rqvae, seqmodel=seqmodel)

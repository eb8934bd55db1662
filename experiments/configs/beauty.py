"""Amazon Reviews 2014 Beauty 5-core, the STATIC cold-start protocol.

Command: `genret pipeline --dataset beauty --workdir runs/beauty`
Retriever alone: `genret train-retriever --workdir runs/beauty --cold-start 0.02 --config beauty`,
12 min on the shared 2-core reference CPU, validation Recall@10 0.068 (docs/BENCHMARKS.md).
"""

import dataclasses

from experiments.config import Config


def get_config() -> Config:
    cfg = Config(name="beauty")
    # Retriever: sized so `genret train-retriever --cold-start 0.02` takes <= 20 min on the 2-core
    # reference CPU (docs/BENCHMARKS.md, "Retriever training").
    seqmodel = dataclasses.replace(
        cfg.seqmodel,
        num_layers=2,
        d_model=64,
        num_heads=2,
        mlp_dim=128,
        layout="causal",
        batch_size=128,
        learning_rate=2e-3,
        num_epochs=10,
        eval_every=174,
        eval_users=1000,
    )
    # Tokenizer latent width 32 (default 8), chosen on the validation protocol (train-retriever
    # --split cold-val; eval-cold-start --validation; docs/RESULTS.md): Recall@1 3.04% vs 2.23%.
    rqvae = dataclasses.replace(cfg.rqvae, latent_dim=32)
    return dataclasses.replace(
        cfg, data=dataclasses.replace(cfg.data, dataset="beauty"), seqmodel=seqmodel, rqvae=rqvae
    )

"""Beauty, leave-one-out (TIGER's protocol): four item-level retrievers as one ensemble.

`beauty_item`'s retriever at dropout 0.3 and batch 64 with the co-occurrence teacher, checkpoints
chosen on 10,000 validation users, seeds 0-3 ranked together, beside their hybrid with item
co-occurrence; SIDs of 3 x 256 codes (TIGER's) on TF-IDF text plus 64 co-occurrence components.
Command: `genret pipeline --dataset beauty --config beauty_item_cf --workdir runs/beauty_item_cf`.
Test R@5 / N@5 / R@10 / N@10 5.35 / 3.72 / 8.06 / 4.59 at pipeline seed 0, three-seed mean 5.44 /
3.78 / 8.08 / 4.62 (TIGER: 4.54 / 3.21 / 6.48 / 3.84), AMD EPYC with AVX-512, about 56 minutes of
training on 2 cores; on an AMD EPYC without AVX-512 seed 0 gives 5.51 / 3.84 / 8.14 / 4.68; on the
Intel Xeon under jax 0.12, 5.34 / 3.71 / 7.96 / 4.55 (87.5 minutes in all).
Batch 64 against 128 (validated every 171 steps), seeds 0 and 1 as two-member ensembles, on the
6,818 validation users outside both members' checkpoint holdouts: 7.14 / 4.90 / 10.38 / 5.95
against 6.88 / 4.69 / 10.12 / 5.73 (`genret eval-warm --validation`, Xeon).
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty, beauty_item


def collaborative(cfg: Config) -> Config:
    """`cfg` with this preset's tokenizer, retrievers and leave-one-out evaluation only."""
    cfg = beauty_item.item_retriever(cfg)
    return dataclasses.replace(
        cfg,
        rqvae=dataclasses.replace(cfg.rqvae, cf_dim=64, codebook_size=256),
        seqmodel=dataclasses.replace(
            cfg.seqmodel,
            dropout=0.3,
            cooc_distill=0.5,
            eval_users=10_000,
            batch_size=64,
            eval_every=342,  # twice `beauty_4x128`'s 171: a validation per 21,888 examples
        ),
        eval=dataclasses.replace(
            cfg.eval,
            warm_ensemble_seeds=(1, 2, 3),
            cold=False,
            warm_cooc_weight=0.5,
            warm_cooc_smoothing=100.0,
        ),
    )


def get_config() -> Config:
    return dataclasses.replace(collaborative(beauty.get_config()), name="beauty_item_cf")

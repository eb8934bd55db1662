"""The embedded default: the synthetic catalog, small enough for a 2-core CPU.

`genret`'s default config: the default tokenizer with 2,000 steps, a 2 x D64 retriever on
bucketed rows for 4 epochs, 3,000 sampled leave-one-out test users, two stages at a time.
Command: `genret pipeline --dataset synthetic --workdir runs/synthetic`.
Test STATIC Recall@1 14.24 / 8.63 at 2% / 5% cold items, leave-one-out Recall@10 8.33 (constrained
to the catalog), seed 0, AMD EPYC with AVX-512, about 3.5 minutes on 2 cores; other processors
give other floats (without AVX-512: 21.28 / 9.96 and 7.80).
"""

import dataclasses

from experiments.config import Config


def get_config() -> Config:
    cfg = Config(name="synthetic")
    # 2,000 tokenizer steps instead of 3,000: no SID collision either way on this catalog.
    rqvae = dataclasses.replace(cfg.rqvae, num_steps=2000)
    # Bucketed rows (2.7x fewer milliseconds per step than causal ones on this catalog) and 4
    # epochs, not 5: 45% less CPU work, so that the pipeline stays within 10 minutes on a slow
    # day of a 2-core CPU (docs/BENCHMARKS.md, "End to end").
    seqmodel = dataclasses.replace(
        cfg.seqmodel,
        num_layers=2,
        d_model=64,
        num_heads=2,
        mlp_dim=128,
        num_epochs=4,
        layout="bucketed",
    )
    # A seeded sample of 3,000 leave-one-out test users keeps the evaluation short.
    evaluation = dataclasses.replace(cfg.eval, max_test_users=3000)
    # Two stages at once, the retrievers side by side (the evaluations, which time themselves,
    # alone): one retriever of this size keeps the 2-core CPU 65-75% busy, two at a time took
    # 13-15% less wall time, every number the same (docs/BENCHMARKS.md, "Stages side by side").
    return dataclasses.replace(cfg, rqvae=rqvae, seqmodel=seqmodel, eval=evaluation, jobs=2)

"""The embedded default: the synthetic catalog, small enough for CPU.

Command: `genret pipeline --dataset synthetic --workdir runs/synthetic`
"""

import dataclasses

from experiments.config import Config


def get_config() -> Config:
    cfg = Config(name="synthetic")
    # 2,000 tokenizer steps instead of 3,000: no SID collision either way on this catalog.
    rqvae = dataclasses.replace(cfg.rqvae, num_steps=2000)
    # The bucketed layout (rows cut to their bucket's history length; 2.7x fewer milliseconds per
    # step than the causal layout in `genret bench-train` on this catalog) and 4 epochs instead of
    # 5: since session 48 the pipeline does 45% less CPU work than with causal rows and 5 epochs,
    # for the 10-minute bound on a slow day of the 2-core CPU (docs/BENCHMARKS.md, "End to end").
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

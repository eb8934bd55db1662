"""Beauty with the larger retriever chosen on Beauty's full validation split (issue 17, session 7).

The `beauty` preset's tokenizer and cold-start beam scores; the retriever is 4 layers x D128 (MLP
512, 4 heads; 722k parameters), trained in the bucketed layout (rows cut to their history-length
bucket, 2.6x less time per epoch than causal rows), dropout 0.2, AdamW 1e-3 with weight decay
0.035, 500 warm-up steps, cosine over 30 epochs, validated every epoch and early-stopped after 10
epochs without a better holdout recall. Leave-one-out on the shared 2-core CPU: 34 minutes and
full validation Recall@10 7.07% against the `beauty` preset's 5.08% (session 7's run, recorded
here; docs/RESULTS.md, "The item-level retriever"). `beauty_item` is the same model with one
backbone position per item: 7.35% in a quarter of the time per epoch.

Command: `genret train-retriever --workdir runs/beauty --split loo --config beauty_4x128`
The cold-start numbers of record still come from `beauty` (not rerun with this retriever yet).
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty


def larger_retriever(cfg: Config) -> Config:
    """`cfg` with this preset's retriever and schedule (the tokenizer and scores unchanged); its
    leave-one-out part runs on this run's own tokenizer (no `eval.warm_preset`)."""
    seqmodel = dataclasses.replace(
        cfg.seqmodel,
        num_layers=4,
        d_model=128,
        num_heads=4,
        mlp_dim=512,
        dropout=0.2,
        layout="bucketed",
        batch_size=128,
        learning_rate=1e-3,
        weight_decay=0.035,
        warmup_steps=500,
        num_epochs=30,
        eval_every=171,  # about one epoch of Beauty's leave-one-out split
        patience=10,
    )
    ev = dataclasses.replace(cfg.eval, warm_preset="")
    return dataclasses.replace(cfg, seqmodel=seqmodel, eval=ev)


def get_config() -> Config:
    return dataclasses.replace(larger_retriever(beauty.get_config()), name="beauty_4x128")

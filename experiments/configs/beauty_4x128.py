"""Beauty, leave-one-out on the `beauty` tokenizer with a larger token-level retriever.

`beauty`'s tokenizer and beam scores; a 4 x D128 retriever (MLP 512, 4 heads), dropout 0.2, on
bucketed rows (2.6x less time per epoch than causal ones), AdamW 1e-3 with weight decay 0.035,
500 warm-up steps, cosine over 30 epochs, validated once an epoch, stopped after 10 without gain.
Command: `genret train-retriever --workdir runs/beauty --split loo --config beauty_4x128`, where
runs/beauty holds the `beauty` pipeline's data and tokenizer.
Full validation Recall@10 7.07 at seed 0 (`beauty`'s retriever: 5.08), 34 minutes of training on
a shared 2-core CPU; no test number recorded. `beauty_item` does better in less time.
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty


def larger_retriever(cfg: Config) -> Config:
    """`cfg` with this retriever, leave-one-out on its own tokenizer (no `eval.warm_preset`)."""
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

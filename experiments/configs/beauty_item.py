"""Beauty with the item-level retriever (`seqmodel.arch=item`, issue 17, session 8).

`beauty_4x128`'s retriever shape and schedule (4 layers x D128, MLP 512, 4 heads, dropout 0.2,
bucketed rows, AdamW 1e-3, weight decay 0.035, cosine over 30 epochs, early stopping), with one
backbone position per history item and a GRU head over the SID levels instead of one position per
SID token: L+1 = 4 times fewer backbone positions per history.

Command: `genret train-retriever --workdir runs/beauty --split loo --config beauty_item`, then
`genret eval-warm --workdir runs/beauty`. Session 8, the 2-core CPU shared with one other training
job: 21.6 minutes of training (30 epochs, best at 20), full validation Recall@10 7.35%, test
Recall@5 / NDCG@5 / Recall@10 / NDCG@10 3.67 / 2.45 / 5.50 / 3.04% (TIGER: 4.54 / 3.21 / 6.48 /
3.84; docs/RESULTS.md, lead tables). The cold-start numbers of record still come from `beauty`.
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty, beauty_4x128


def item_retriever(cfg: Config) -> Config:
    """`cfg` with this preset's retriever (the tokenizer and cold-start scores unchanged)."""
    cfg = beauty_4x128.larger_retriever(cfg)
    return dataclasses.replace(cfg, seqmodel=dataclasses.replace(cfg.seqmodel, arch="item"))


def get_config() -> Config:
    return dataclasses.replace(item_retriever(beauty.get_config()), name="beauty_item")

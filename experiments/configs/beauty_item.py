"""Beauty, leave-one-out on the `beauty` tokenizer with the item-level retriever.

`beauty_4x128` with `seqmodel.arch=item`: one backbone position per history item and a GRU head
over the SID levels, instead of one position per SID token (4 times fewer positions).
Command: `genret train-retriever --workdir runs/beauty --split loo --config beauty_item`, then
`genret eval-warm --workdir runs/beauty`.
Test Recall@5 / NDCG@5 / Recall@10 / NDCG@10 3.67 / 2.45 / 5.50 / 3.04 at seed 0 (TIGER: 4.54 /
3.21 / 6.48 / 3.84), full validation Recall@10 7.35; 21.6 minutes of training on a 2-core CPU
shared with one other job.
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty, beauty_4x128


def item_retriever(cfg: Config) -> Config:
    """`cfg` with this preset's retriever; the tokenizer and cold-start scores unchanged."""
    cfg = beauty_4x128.larger_retriever(cfg)
    return dataclasses.replace(cfg, seqmodel=dataclasses.replace(cfg.seqmodel, arch="item"))


def get_config() -> Config:
    return dataclasses.replace(item_retriever(beauty.get_config()), name="beauty_item")

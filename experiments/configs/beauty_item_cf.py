"""Beauty, leave-one-out: `beauty_item` with collaborative SIDs and a hashed item embedding
(issue 17, session 9; chosen on Beauty's validation split).

Two changes on top of `beauty_item` (the item-level 4 x 128 retriever and its schedule):
- the tokenizer embeds each item as its TF-IDF text vector plus 64 components of its
  co-occurrence in training histories (`rqvae.cf_dim=64`, rqvae/cooc.py): users' last two items and
  the newest 5% of items are never read, cold items get theirs from their text;
- the retriever adds to each history item's input a learned embedding of its whole SID, hashed
  into 65,536 rows (`seqmodel.item_embed_buckets`).

Commands: `genret prepare --dataset beauty --config beauty_item_cf --workdir W`, `genret
train-tokenizer --workdir W --config beauty_item_cf`, `genret train-retriever --workdir W --split
loo --config beauty_item_cf`, `genret eval-warm --workdir W`. Session 9, the 2-core CPU shared with
two or three other trainings: 35 minutes of training (early stop in epoch 28, best at 18), full
validation Recall@10 8.21% (seed 1: 8.37%; `beauty_item`: 7.35 / 7.52%), test Recall@5 / NDCG@5 /
Recall@10 / NDCG@10 3.81 / 2.62 / 5.88 / 3.29% (seed 1: 4.02 / 2.68 / 6.19 / 3.38%; TIGER: 4.54 /
3.21 / 6.48 / 3.84). docs/RESULTS.md, lead tables.
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty, beauty_item


def collaborative(cfg: Config) -> Config:
    """`cfg` with `beauty_item`'s retriever, co-occurrence SIDs and the hashed item embedding."""
    cfg = beauty_item.item_retriever(cfg)
    return dataclasses.replace(
        cfg,
        rqvae=dataclasses.replace(cfg.rqvae, cf_dim=64),
        seqmodel=dataclasses.replace(cfg.seqmodel, item_embed_buckets=65536),
    )


def get_config() -> Config:
    return dataclasses.replace(collaborative(beauty.get_config()), name="beauty_item_cf")

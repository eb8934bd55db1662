"""Beauty, leave-one-out: `beauty_item` with collaborative SIDs (issue 17, session 9; chosen on
Beauty's validation split).

One change on top of `beauty_item` (the item-level 4 x 128 retriever and its schedule): the
tokenizer embeds each item as its TF-IDF text vector plus 64 components of its co-occurrence in
training histories (`rqvae.cf_dim=64`, rqvae/cooc.py); users' last two items and the newest 5% of
items are never read, and cold items get theirs from their text. (A hashed item embedding on the
retriever's input, `seqmodel.item_embed_buckets=65536`, was measured with it and left out: no
better on validation, 13% slower.)

Commands: `genret prepare --dataset beauty --config beauty_item_cf --workdir W`, `genret
train-tokenizer --workdir W --config beauty_item_cf`, `genret train-retriever --workdir W --split
loo --config beauty_item_cf`, `genret eval-warm --workdir W`. Session 9, the 2-core CPU shared with
two or three other trainings: 34 minutes of training (30 epochs, best at 23), full validation
Recall@10 8.35% (`beauty_item`: 7.35%), test Recall@5 / NDCG@5 / Recall@10 / NDCG@10 4.20 / 2.86 /
6.31 / 3.54% (TIGER: 4.54 / 3.21 / 6.48 / 3.84). docs/RESULTS.md, lead tables.
"""

import dataclasses

from experiments.config import Config
from experiments.configs import beauty, beauty_item


def collaborative(cfg: Config) -> Config:
    """`cfg` with `beauty_item`'s retriever and co-occurrence SIDs of 256 codes per level."""
    cfg = beauty_item.item_retriever(cfg)
    return dataclasses.replace(
        cfg, rqvae=dataclasses.replace(cfg.rqvae, cf_dim=64, codebook_size=256)
    )


def get_config() -> Config:
    return dataclasses.replace(collaborative(beauty.get_config()), name="beauty_item_cf")

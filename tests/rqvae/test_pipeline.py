"""tokenize_catalog: texts to unique SIDs, embedding cache, warm-only fitting, summary."""

import numpy as np
import pytest

from data.types import Catalog, Histories
from rqvae import load_sids
from rqvae.config import RQVAEConfig
from rqvae.pipeline import summary, tokenize_catalog

WORDS = ["red", "blue", "lipstick", "shampoo", "mascara", "gel", "oil", "matte", "dry", "soft"]


def _catalog(n=40):
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, 4)) for _ in range(n)]
    return Catalog(
        asins=np.array([f"B{i:03d}" for i in range(n)]),
        texts=texts,
        leaf_categories=[t.split()[0] for t in texts],
        first_time=np.arange(n, dtype=np.int64),
    )


CFG = RQVAEConfig(
    embed_dim=8,
    tfidf_min_df=1,
    codebook_size=4,
    latent_dim=4,
    hidden_dims=(8,),
    batch_size=16,
    num_steps=4,
    warmup_steps=1,
    restart_every=2,
    checkpoint_every=2,
)


@pytest.mark.slow
def test_tokenize_catalog_warm(tmp_path):
    import dataclasses

    cfg = dataclasses.replace(CFG, fit_on="warm")
    # Each item's first interaction at its index: the newest quarter is left out of the fit.
    histories = Histories.from_lists([list(range(40))])
    m = tokenize_catalog(
        cfg,
        _catalog(),
        tmp_path / "tok",
        histories=histories,
        cache_dir=tmp_path / "emb",
        cold_fraction=0.25,
        progress=False,
    )
    assert m["num_fit_items"] == 30 and m["num_items"] == 40
    assert len(list((tmp_path / "emb").glob("tfidf-*.npy"))) == 1
    sids, asins = load_sids(tmp_path / "tok")
    assert asins[0] == "B000" and len(np.unique(sids, axis=0)) == 40
    s = summary(m)
    assert len(s["codes_used"]) == 3 and 0.0 <= s["nearest_code_collision_item_fraction"] <= 1.0

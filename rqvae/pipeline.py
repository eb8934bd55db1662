"""A catalog's texts -> embeddings (cached) -> RQ-VAE -> SIDs, and a one-line summary."""

from pathlib import Path

from data import splits
from data.types import Catalog, Histories
from rqvae.config import RQVAEConfig
from rqvae.cooc import cooccurrence_vectors, with_cooccurrence
from rqvae.embed import embed_texts
from rqvae.train import train_and_evaluate


def tokenize_catalog(
    cfg: RQVAEConfig,
    catalog: Catalog,
    out_dir: Path,
    *,
    histories: Histories,
    cache_dir: Path | None,
    cold_fraction: float,
    progress: bool = True,
) -> dict:
    """Embeds the catalog (with `rqvae.cf_dim`, also the co-occurrence in `histories`), fits on
    all items or (fit_on=warm) on those outside the newest `cold_fraction`, and writes the SIDs of
    all items to `out_dir`; returns the metrics.

    `histories` are the interactions the tokenizer may read (data.splits.tokenizer_histories):
    items are ranked by their first interaction there, those with none counted newest, so that
    no held-out interaction decides which items are left out.
    """
    x = embed_texts(catalog.texts, cfg, cache_dir)
    cold = splits.cold_start_items(splits.first_times(histories, len(x)), cold_fraction)
    if cfg.cf_dim:
        cf, _ = cooccurrence_vectors(
            histories, x, cold, dim=cfg.cf_dim, window=cfg.cf_window, seed=cfg.seed
        )
        x = with_cooccurrence(x, cf, cfg.cf_weight)
    fit_mask = ~cold if cfg.fit_on == "warm" else None
    return train_and_evaluate(
        cfg,
        x,
        out_dir,
        asins=[str(a) for a in catalog.asins],
        fit_mask=fit_mask,
        leaf_categories=list(catalog.leaf_categories),
        progress=progress,
    )


def summary(metrics: dict) -> dict:
    """The numbers a person checks first."""
    keys = (
        "num_items",
        "num_fit_items",
        "total_seconds",
        "reconstruction_loss",
        "collision_item_fraction",
        "collision_level_max",
        "semantic_level1",
    )
    out = {k: metrics.get(k) for k in keys}
    out["codes_used"] = [lv["codes_used"] for lv in metrics["levels"]]
    out["nearest_code_collision_item_fraction"] = metrics["nearest_codes"][
        "collision_item_fraction"
    ]
    return out

"""Configuration of the item embedder and the RQ-VAE tokenizer."""

import dataclasses


@dataclasses.dataclass(frozen=True, kw_only=True)
class RQVAEConfig:
    """Embedder choice and RQ-VAE shape and training schedule."""

    embedder: str = "tfidf"  # tfidf | minilm
    embed_dim: int = 256  # E for tfidf (SVD components); minilm is always 384
    tfidf_min_df: int = 2
    tfidf_max_features: int = 100_000
    num_levels: int = 3  # L
    codebook_size: int = 256  # V
    latent_dim: int = 8  # D; small D means fewer Beauty items colliding on all L codes (BENCHMARKS)
    hidden_dims: tuple[int, ...] = (256, 128)
    beta: float = 0.25  # commitment weight
    rotation_trick: bool = False  # gradient through the rotation trick instead of straight-through
    learning_rate: float = 1e-3
    weight_decay: float = 1e-4
    batch_size: int = 1024
    num_steps: int = 3000
    warmup_steps: int = 100
    restart_every: int = 100  # dead-code restart period in steps; 0 disables
    restart_until: float = 0.9  # fraction of num_steps after which codes are no longer restarted
    # Items sharing all L nearest codes move to the nearest free last-level code (sids.py).
    dedup_last_level: bool = True
    checkpoint_every: int = 500
    fit_on: str = "all"  # all | warm
    seed: int = 0
    # > 0: the embedding also holds a collaborative part, cf_dim SVD components of the items'
    # co-occurrence in training histories (rqvae/cooc.py), weighted cf_weight against the text.
    # Only interactions every split trains on are read: each user's last two items and the items
    # of the largest cold-start set are left out, and items left without any get theirs predicted
    # from their text. 0: text alone.
    cf_dim: int = 0
    cf_weight: float = 0.5  # share of the squared norm: sqrt(1 - w) text, sqrt(w) co-occurrence
    cf_window: int = 3  # items up to this many positions apart in a history co-occur

    def __post_init__(self):
        if self.cf_dim < 0 or not 0.0 < self.cf_weight < 1.0 or self.cf_window < 1:
            raise ValueError(
                "rqvae: cf_dim must be >= 0, cf_weight in (0, 1) and cf_window >= 1, got "
                f"{self.cf_dim}, {self.cf_weight}, {self.cf_window}"
            )


def identity_fields(cfg: RQVAEConfig) -> dict:
    """`cfg` as a dict for keys and checkpoint checks (data.fingerprint versions them)."""
    return dataclasses.asdict(cfg)

"""Configuration of the item embedder and the RQ-VAE tokenizer."""

import dataclasses


@dataclasses.dataclass(frozen=True, kw_only=True)
class RQVAEConfig:
    """Embedder choice and RQ-VAE shape and training schedule."""

    embedder: str = "tfidf"  # tfidf | minilm
    embed_dim: int = 256  # E
    num_levels: int = 3  # L
    codebook_size: int = 256  # V
    fit_on: str = "all"  # all | warm
    seed: int = 0

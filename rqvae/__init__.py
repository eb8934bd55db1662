"""Item text embeddings and the RQ-VAE tokenizer that gives every item a unique Semantic ID."""

from rqvae.config import RQVAEConfig
from rqvae.sids import add_collision_level, load_sids, token_vocab_size

__all__ = ["RQVAEConfig", "add_collision_level", "load_sids", "token_vocab_size"]

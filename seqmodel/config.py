"""Configuration of the decoder-only retriever and its training."""

import dataclasses


@dataclasses.dataclass(frozen=True, kw_only=True)
class SeqModelConfig:
    """Transformer shape and training schedule."""

    num_layers: int = 4
    d_model: int = 128  # D
    num_heads: int = 4  # H
    max_history: int = 20  # items kept per history
    batch_size: int = 128
    seed: int = 0

"""Configuration of constrained decoding."""

import dataclasses


@dataclasses.dataclass(frozen=True, kw_only=True)
class DecodeConfig:
    """Beam width and STATIC index layout."""

    beam_size: int = 20  # K
    dense_levels: int = 2  # d: levels stored as a bit-packed dense mask
    seed: int = 0

"""Shared fixtures: strict numpy rank promotion, the real-data folder (skipped when absent)."""

from pathlib import Path

import jax
import pytest

jax.config.update("jax_numpy_rank_promotion", "raise")

AMAZON_ROOT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "amazon2014"


@pytest.fixture
def amazon_root() -> Path:
    """../shared/data/amazon2014; tests using it are skipped where it is absent."""
    if not (AMAZON_ROOT / "Beauty").is_dir():
        pytest.skip(f"real data not found at {AMAZON_ROOT}")
    return AMAZON_ROOT

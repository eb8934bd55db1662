"""Codes -> unique Semantic IDs (collision level), usage metrics, the semantic check, loading."""

from pathlib import Path

import numpy as np
from jaxtyping import Float, Int

from data.errors import ArtifactError

SIDS_FILE = "sids.npy"
ASINS_FILE = "asins.txt"


def add_collision_level(codes: Int[np.ndarray, "N L"]) -> Int[np.ndarray, "N L+1"]:
    """Appends a level numbering items that share all L codes 0..c-1 in catalog order.

    The collision level may count past the codebook size (catalogs with many near-identical
    texts); `token_vocab_size` gives the per-level token block that holds every level.
    """
    codes = np.asarray(codes)
    if codes.ndim != 2 or codes.shape[0] == 0:
        raise ValueError(f"codes: expected a non-empty [N, L] array, got shape {codes.shape}")
    _, inverse, counts = np.unique(codes, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(inverse, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.empty(len(codes), np.int64)
    rank[order] = np.arange(len(codes)) - starts[inverse[order]]
    return np.concatenate([codes, rank[:, None]], axis=1).astype(np.int32)


def token_vocab_size(sids: Int[np.ndarray, "N M"], codebook_size: int) -> int:
    """Values per SID level for the retriever: the codebook size, or more when the collision
    level (the last column) counts past it."""
    sids = np.asarray(sids)
    return max(int(codebook_size), int(sids[:, -1].max()) + 1 if sids.size else 0)


def dedup_last_level(
    codes: Int[np.ndarray, "N L"],
    last_residual: Float[np.ndarray, "N D"],
    last_codebook: Float[np.ndarray, "V D"],
) -> Int[np.ndarray, "N L"]:
    """Items that share all L codes keep their first L-1; all but the nearest move to the nearest
    last-level code still free among the items sharing those L-1 codes (greedy LC-Rec remedy).

    Returns new codes; groups with more than V items under one prefix keep some collisions.
    """
    codes = np.asarray(codes).copy()
    _, inverse, counts = np.unique(codes, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    colliding = np.flatnonzero(counts[inverse] > 1)
    if len(colliding) == 0:
        return codes
    dist = _sq_dist(last_residual[colliding], last_codebook)  # [M, V]
    own = dist[np.arange(len(colliding)), codes[colliding, -1]]
    # Within each full-code group the nearest item stays; order: group, distance, item index.
    order = np.lexsort((colliding, own, inverse[colliding]))
    group_sorted = inverse[colliding][order]
    first = np.concatenate([[True], group_sorted[1:] != group_sorted[:-1]])
    movers = order[~first]
    taken: dict[tuple, set] = {}
    for prefix, last in zip(map(tuple, codes[:, :-1].tolist()), codes[:, -1].tolist(), strict=True):
        taken.setdefault(prefix, set()).add(last)
    # Nearest movers choose first, so the closest fits are kept.
    for m in movers[np.argsort(own[movers], kind="stable")]:
        item = colliding[m]
        used = taken[tuple(codes[item, :-1].tolist())]
        for code in np.argsort(dist[m], kind="stable").tolist():
            if code not in used:
                codes[item, -1] = code
                used.add(code)
                break
    return codes


def _sq_dist(x: np.ndarray, c: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    c = np.asarray(c, np.float64)
    return (x**2).sum(1)[:, None] - 2.0 * x @ c.T + (c**2).sum(1)[None, :]


def check_unique(sids: Int[np.ndarray, "N M"]) -> None:
    """Raises ValueError if two rows are equal."""
    n_unique = len(np.unique(sids, axis=0))
    if n_unique != len(sids):
        raise ValueError(f"SIDs are not unique: {len(sids) - n_unique} duplicate rows")


def code_metrics(codes: Int[np.ndarray, "N L"], *, vocab_size: int) -> dict:
    """Per level: codes used and perplexity; share of items colliding on all L codes."""
    levels = []
    for level in range(codes.shape[1]):
        counts = np.bincount(codes[:, level], minlength=vocab_size)
        p = counts[counts > 0] / counts.sum()
        levels.append(
            {
                "codes_used": int((counts > 0).sum()),
                "codes_used_fraction": float((counts > 0).mean()),
                "perplexity": float(np.exp(-(p * np.log(p)).sum())),
            }
        )
    _, inverse, counts = np.unique(codes, axis=0, return_inverse=True, return_counts=True)
    in_collision = counts[inverse.reshape(-1)] > 1
    return {
        "levels": levels,
        "collision_item_fraction": float(in_collision.mean()),
        "largest_collision_group": int(counts.max()),
        "distinct_code_tuples": int(len(counts)),
    }


def _same_pairs(groups: np.ndarray) -> int:
    counts = np.bincount(groups)
    return int((counts * (counts - 1) // 2).sum())


def semantic_check(
    level1: Int[np.ndarray, " N"], categories: list[str], *, seed: int = 0
) -> dict | None:
    """How often two items with the same level-1 code share their leaf category, vs random codes.

    Items without a category ("") are left out; None when fewer than two have one (Sports'
    keyword-only metadata has none). `random_expected` is the exact expectation when
    the same code sizes are assigned to items at random (= share of all item pairs with equal
    categories); `random_shuffled` is one seeded shuffle of the codes.
    """
    cats = np.asarray(categories, dtype=object)
    keep = cats != ""
    codes = np.asarray(level1)[keep]
    _, cat_ids = np.unique(cats[keep].astype(str), return_inverse=True)
    if len(codes) < 2:
        return None

    def share(c: np.ndarray) -> float:
        pairs = _same_pairs(c)
        both = _same_pairs(c.astype(np.int64) * (cat_ids.max() + 1) + cat_ids)
        return both / max(pairs, 1)

    n = len(codes)
    shuffled = np.random.default_rng(seed).permutation(codes)
    return {
        "items_with_category": int(n),
        "same_code_same_category": share(codes),
        "random_expected": _same_pairs(cat_ids) / (n * (n - 1) // 2),
        "random_shuffled": share(shuffled),
    }


def load_sids(tokenizer_dir: str | Path) -> tuple[np.ndarray, list[str]]:
    """Reads `sids.npy` (int32 [N, L+1]) and `asins.txt` from a tokenizer directory."""
    tokenizer_dir = Path(tokenizer_dir)
    path = tokenizer_dir / SIDS_FILE
    if not path.exists():
        raise ArtifactError(f"{path}: no SIDs; run `genret train-tokenizer` first")
    try:
        sids = np.load(path, allow_pickle=False)
        asins = (tokenizer_dir / ASINS_FILE).read_text().splitlines()
    except (OSError, ValueError, EOFError) as e:  # truncated or not an .npy file
        raise ArtifactError(
            f"{tokenizer_dir}: cannot read the SIDs ({type(e).__name__}: {e}); "
            "run `genret train-tokenizer` again"
        ) from None
    if sids.ndim != 2 or sids.dtype != np.int32:
        raise ArtifactError(f"{path}: expected int32 [N, L+1], got {sids.dtype} {sids.shape}")
    if len(asins) != len(sids):
        raise ArtifactError(
            f"{tokenizer_dir / ASINS_FILE}: {len(asins)} asins for {len(sids)} SID rows"
        )
    return sids, asins


def check_sids_match(
    asins: list[str],
    catalog_asins,
    tokenizer_dir: Path | str,
    *,
    sids: np.ndarray | None = None,
    codebook_size: int | None = None,
) -> None:
    """The tokenizer's item order must be the prepared catalog's, else SIDs name wrong items."""
    if sids is not None and codebook_size is not None:
        # The code levels must fit the codebook; the last (collision) level may count past it.
        codes = np.asarray(sids)[:, :-1]
        if codes.size and codes.max() >= codebook_size:
            raise ArtifactError(
                f"{tokenizer_dir}/{SIDS_FILE}: codes reach {codes.max()}, but the config's "
                f"rqvae.codebook_size is {codebook_size}; retrain the tokenizer with this config"
            )
    catalog = [str(a) for a in catalog_asins]
    if len(asins) != len(catalog):
        raise ArtifactError(
            f"{tokenizer_dir}: {len(asins)} SIDs for a prepared catalog of {len(catalog)} items; "
            "retrain the tokenizer on this prepared dataset"
        )
    bad = next((i for i, (a, b) in enumerate(zip(asins, catalog, strict=True)) if a != b), None)
    if bad is not None:
        raise ArtifactError(
            f"{tokenizer_dir}/{ASINS_FILE} line {bad + 1}: {asins[bad]!r}, but the prepared "
            f"catalog has {catalog[bad]!r}; retrain the tokenizer on this prepared dataset"
        )

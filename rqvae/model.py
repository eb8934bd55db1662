"""The RQ-VAE: MLP encoder, residual quantizer of codebook levels, MLP decoder (flax nnx)."""

from collections.abc import Sequence

import flax
import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float, Int

from rqvae.config import RQVAEConfig


class MLP(nnx.Module):
    """Linear layers with SiLU between them (none after the last)."""

    def __init__(self, dims: Sequence[int], *, rngs: nnx.Rngs):
        self.layers = nnx.List(
            [nnx.Linear(a, b, rngs=rngs) for a, b in zip(dims[:-1], dims[1:], strict=True)]
        )

    def __call__(self, x: Float[Array, "B I"]) -> Float[Array, "B O"]:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = nnx.silu(x)
        return x


def _sq_dist(x_BD: Float[Array, "B D"], c_VD: Float[Array, "V D"]) -> Float[Array, "B V"]:
    return (
        jnp.sum(x_BD**2, axis=-1, keepdims=True)
        - 2.0 * x_BD @ c_VD.T
        + jnp.sum(c_VD**2, axis=-1)[None, :]
    )


class CodebookLevel(nnx.Module):
    """One level of V codes in the latent space; assigns each residual its nearest code."""

    def __init__(self, codebook_size: int, dim: int, *, rngs: nnx.Rngs):
        init = jax.random.normal(rngs.params(), (codebook_size, dim), jnp.float32) * 0.1
        self.codebook = nnx.Param(init)

    def __call__(self, residual: Float[Array, "B D"]) -> Int[Array, " B"]:
        return jnp.argmin(_sq_dist(residual, self.codebook[...]), axis=-1).astype(jnp.int32)


@flax.struct.dataclass
class Quantized:
    """What the quantizer returns: codes, the quantized latent, and the VQ loss terms."""

    codes: Int[Array, "B L"]
    z_hat: Float[Array, "B D"]  # sum of the chosen codes (no gradient estimator applied)
    codebook_loss: Float[Array, ""]
    commitment_loss: Float[Array, ""]
    residuals: Float[Array, "L B D"]


class ResidualQuantizer(nnx.Module):
    """L codebook levels; level l quantizes what levels < l left unexplained."""

    def __init__(self, num_levels: int, codebook_size: int, dim: int, *, rngs: nnx.Rngs):
        self.levels = nnx.List(
            [CodebookLevel(codebook_size, dim, rngs=rngs) for _ in range(num_levels)]
        )

    def __call__(self, z: Float[Array, "B D"]) -> Quantized:
        residual_BD = z
        z_hat_BD = jnp.zeros_like(z)
        codes, residuals = [], []
        cb_loss = jnp.zeros((), jnp.float32)
        commit = jnp.zeros((), jnp.float32)
        for level in self.levels:
            code_B = level(jax.lax.stop_gradient(residual_BD))
            e_BD = level.codebook[...][code_B]
            # Codebook term moves codes to residuals; commitment term moves the encoder to codes.
            cb_loss += jnp.mean(jnp.sum((jax.lax.stop_gradient(residual_BD) - e_BD) ** 2, -1))
            commit += jnp.mean(jnp.sum((residual_BD - jax.lax.stop_gradient(e_BD)) ** 2, -1))
            residuals.append(residual_BD)
            codes.append(code_B)
            z_hat_BD = z_hat_BD + e_BD
            residual_BD = residual_BD - jax.lax.stop_gradient(e_BD)
        return Quantized(
            codes=jnp.stack(codes, axis=1),
            z_hat=z_hat_BD,
            codebook_loss=cb_loss,
            commitment_loss=commit,
            residuals=jnp.stack(residuals),
        )


def straight_through(z: Float[Array, "B D"], z_hat: Float[Array, "B D"]) -> Float[Array, "B D"]:
    """Forward value z_hat, gradient of the identity to z."""
    return z + jax.lax.stop_gradient(z_hat - z)


def rotation_trick(z: Float[Array, "B D"], z_hat: Float[Array, "B D"]) -> Float[Array, "B D"]:
    """Forward value z_hat; the gradient goes through the rotation+scaling taking z to z_hat.

    Fifty et al. 2024, "Restructuring vector quantization with the rotation trick", eq. 4: with
    r = z/|z|, e = z_hat/|z_hat|, w = (r+e)/|r+e|, R z = z - 2 w (w.z) + 2 e (r.z).
    """
    sg = jax.lax.stop_gradient
    eps = 1e-8
    z_norm = jnp.linalg.norm(z, axis=-1, keepdims=True)
    zh_norm = jnp.linalg.norm(z_hat, axis=-1, keepdims=True)
    r = sg(z / (z_norm + eps))
    e = sg(z_hat / (zh_norm + eps))
    w = r + e
    w = sg(w / (jnp.linalg.norm(w, axis=-1, keepdims=True) + eps))
    rotated = (
        z
        - 2.0 * w * jnp.sum(w * z, -1, keepdims=True)
        + 2.0 * e * jnp.sum(r * z, -1, keepdims=True)
    )
    return sg(zh_norm / (z_norm + eps)) * rotated


@flax.struct.dataclass
class RQVAEOutput:
    """Reconstruction plus the quantizer's output."""

    x_hat: Float[Array, "B E"]
    quantized: Quantized


class RQVAE(nnx.Module):
    """Encoder E -> D, residual quantizer of L levels x V codes, decoder D -> E."""

    def __init__(self, cfg: RQVAEConfig, embed_dim: int, *, rngs: nnx.Rngs):
        self.rotation = cfg.rotation_trick
        self.encoder = MLP([embed_dim, *cfg.hidden_dims, cfg.latent_dim], rngs=rngs)
        self.quantizer = ResidualQuantizer(
            cfg.num_levels, cfg.codebook_size, cfg.latent_dim, rngs=rngs
        )
        self.decoder = MLP([cfg.latent_dim, *reversed(cfg.hidden_dims), embed_dim], rngs=rngs)

    def __call__(self, x: Float[Array, "B E"]) -> RQVAEOutput:
        z_BD = self.encoder(x)
        q = self.quantizer(z_BD)
        estimator = rotation_trick if self.rotation else straight_through
        return RQVAEOutput(x_hat=self.decoder(estimator(z_BD, q.z_hat)), quantized=q)

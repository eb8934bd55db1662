"""RQ-VAE modules: shapes, nearest-code assignment, loss golden values, gradient estimators."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rqvae.config import RQVAEConfig
from rqvae.model import RQVAE, ResidualQuantizer, rotation_trick, straight_through

CFG = RQVAEConfig(num_levels=3, codebook_size=8, latent_dim=4, hidden_dims=(16,))


def test_forward_shapes_dtypes_finite():
    model = RQVAE(CFG, 6, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(0), (2, 6))
    out = model(x)
    assert out.x_hat.shape == (2, 6) and out.x_hat.dtype == jnp.float32
    assert out.quantized.codes.shape == (2, 3) and out.quantized.codes.dtype == jnp.int32
    assert bool(jnp.all((out.quantized.codes >= 0) & (out.quantized.codes < 8)))
    assert bool(jnp.isfinite(out.x_hat).all())


def test_jit_matches_eager():
    model = RQVAE(CFG, 6, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model, nnx.Param)
    x = jax.random.normal(jax.random.key(1), (2, 6))

    def f(p, x):
        return nnx.merge(graphdef, p)(x).x_hat

    np.testing.assert_allclose(jax.jit(f)(params, x), f(params, x), rtol=1e-5, atol=1e-6)


def test_residual_quantizer_golden():
    rq = ResidualQuantizer(2, 2, 2, rngs=nnx.Rngs(0))
    rq.levels[0].codebook[...] = jnp.array([[0.0, 0.0], [4.0, 0.0]])
    rq.levels[1].codebook[...] = jnp.array([[1.0, 0.0], [0.0, 1.0]])
    q = rq(jnp.array([[4.0, 1.5], [0.5, 0.0]]))
    # Item 0: 4,1.5 -> code 1 (4,0), residual (0,1.5) -> code 1 (0,1), left (0,0.5).
    # Item 1: .5,0 -> code 0, residual (.5,0): equidistant-free -> code 1? |(.5,0)-(1,0)|^2=.25,
    # |(.5,0)-(0,1)|^2=1.25 -> code 0 (1,0), left (-.5, 0).
    np.testing.assert_array_equal(q.codes, [[1, 1], [0, 0]])
    np.testing.assert_allclose(q.z_hat, [[4.0, 1.0], [1.0, 0.0]])
    # Per level, mean over items of |residual - code|^2: level 0 (2.25+.25)/2, level 1 (.25+.25)/2.
    np.testing.assert_allclose(
        q.codebook_loss,
        1.25 + 0.25,
        rtol=1e-6,
        err_msg="codebook loss is the per-level squared quantization error",
    )
    np.testing.assert_allclose(q.commitment_loss, q.codebook_loss, rtol=1e-6)


def test_straight_through_value_and_gradient():
    z = jnp.array([[1.0, 2.0]])
    zh = jnp.array([[0.5, -1.0]])
    np.testing.assert_allclose(straight_through(z, zh), zh)
    g = jax.grad(lambda z: jnp.sum(straight_through(z, zh) * jnp.array([[3.0, 4.0]])))(z)
    np.testing.assert_allclose(g, [[3.0, 4.0]])


def test_rotation_trick_value_and_rotated_gradient():
    z = jnp.array([[3.0, 0.0]])
    zh = jnp.array([[0.0, 1.5]])  # a quarter turn and half the length
    np.testing.assert_allclose(rotation_trick(z, zh), zh, atol=1e-6)
    jac = jax.jacobian(lambda v: rotation_trick(v[None], zh)[0])(z[0])
    # The Jacobian is the (stopped) rotation times the scale 0.5: orthogonal up to scale.
    np.testing.assert_allclose(jac @ jac.T, 0.25 * jnp.eye(2), atol=1e-6)
    np.testing.assert_allclose(jac @ jnp.array([1.0, 0.0]), [0.0, 0.5], atol=1e-6)


def test_rotation_option_changes_only_gradients():
    x = jax.random.normal(jax.random.key(2), (2, 6))
    plain = RQVAE(CFG, 6, rngs=nnx.Rngs(0))
    rot = RQVAE(RQVAEConfig(**{**CFG.__dict__, "rotation_trick": True}), 6, rngs=nnx.Rngs(0))
    np.testing.assert_allclose(plain(x).x_hat, rot(x).x_hat, rtol=1e-4, atol=1e-5)

    def enc_grad(m):
        g, p = nnx.split(m, nnx.Param)
        return jax.grad(lambda p: jnp.sum(nnx.merge(g, p)(x).x_hat ** 2))(p)

    a = jax.tree.leaves(enc_grad(plain)["encoder"])
    b = jax.tree.leaves(enc_grad(rot)["encoder"])
    assert any(not np.allclose(u, v) for u, v in zip(a, b, strict=True))

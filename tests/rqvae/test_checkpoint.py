"""Checkpoint helpers: state and metadata round trip, latest step, restore into abstract shapes."""

import jax
import jax.numpy as jnp
import numpy as np

from rqvae import checkpoint


def test_round_trip(tmp_path):
    state = {"w": jnp.arange(6.0).reshape(2, 3), "step": jnp.array(3, jnp.int32)}
    mngr = checkpoint.manager(tmp_path / "ck")
    assert checkpoint.latest_step(mngr) is None
    checkpoint.save(mngr, 3, state, {"embed_dim": 3})
    checkpoint.save(mngr, 5, jax.tree.map(lambda x: x + 1, state), {"embed_dim": 3})
    mngr.wait_until_finished()
    assert checkpoint.latest_step(mngr) == 5
    assert checkpoint.restore_meta(mngr, 5) == {"embed_dim": 3}
    got = checkpoint.restore_state(mngr, 3, jax.eval_shape(lambda: state))
    np.testing.assert_array_equal(got["w"], state["w"])
    assert got["step"].dtype == jnp.int32 and int(got["step"]) == 3
    mngr.close()

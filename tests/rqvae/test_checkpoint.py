"""Checkpoint helpers: state and metadata round trip, latest step, restore into abstract shapes,
a save that the disk refuses."""

import errno
import logging
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from data.errors import WriteError
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


def _full_disk_after(monkeypatch, n: int) -> None:
    """Orbax's JSON writes fail as a full disk fails from the n-th one on."""
    from orbax.checkpoint._src.handlers import json_checkpoint_handler as jch

    real, calls = jch.JsonCheckpointHandler._save_fn, []

    async def save_fn(self, x, directory):
        calls.append(directory)
        if len(calls) >= n:
            path = os.fspath(directory / "metadata")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return await real(self, x, directory)

    monkeypatch.setattr(jch.JsonCheckpointHandler, "_save_fn", save_fn)


def test_a_full_disk_is_one_error_naming_the_folder_and_leaves_no_partial_save(
    tmp_path, monkeypatch, caplog
):
    _full_disk_after(monkeypatch, 2)
    state = {"w": jnp.arange(3.0)}
    mngr = checkpoint.manager(tmp_path / "ck")
    directory = (tmp_path / "ck").resolve()
    checkpoint.save(mngr, 1, state, {"n": 1})
    checkpoint.save(mngr, 2, state, {"n": 2})  # asynchronous: fails at the next wait
    with pytest.raises(WriteError) as e:
        checkpoint.close(mngr)
    assert str(e.value) == f"no space left on device while saving the checkpoint to {directory}"
    assert [p.name for p in directory.iterdir()] == ["1"], "a temporary folder was left"
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    mngr = checkpoint.manager(directory)
    assert checkpoint.latest_step(mngr) == 1
    assert checkpoint.restore_meta(mngr, 1) == {"n": 1}
    checkpoint.close(mngr)


def test_other_errors_of_a_save_pass_unchanged(tmp_path):
    mngr = checkpoint.manager(tmp_path / "ck")
    with pytest.raises(TypeError), checkpoint.saving(tmp_path / "ck"):
        raise TypeError("a bug")
    mngr.close()

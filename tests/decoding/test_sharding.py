"""Beam search on forced host CPU devices: the batch sharded (2 devices) equals 1 device, and the
STATIC (either layout) and live indexes split over 8 devices give the replicated index's beams."""

import textwrap

import pytest

from tests.conftest import run_on_forced_cpu_devices

_SCRIPT = textwrap.dedent(
    """
    import jax, numpy as np
    assert jax.device_count() == 2, jax.devices()
    from decoding import StaticConstraint, StaticIndex
    from decoding.sharding import data_mesh, replicate, shard_batch
    from tests.decoding.helpers import jitted_search, random_log_probs

    rng = np.random.default_rng(0)
    V, L, K, B = 16, 4, 6, 8
    sids = rng.integers(0, V, (200, L))
    lp = random_log_probs(rng, B, L, V)
    constraint = StaticConstraint(StaticIndex.build(sids, vocab_size=V))
    search = jitted_search(K, L, True)
    one = jax.device_put((lp[:, 0], {"lp": lp}, constraint), jax.devices()[0])
    single = search(*one)
    mesh = data_mesh()
    init, cache = shard_batch((lp[:, 0], {"lp": lp}), mesh)
    multi = search(init, cache, replicate(constraint, mesh))
    assert len(multi.tokens.sharding.device_set) == 2, multi.tokens.sharding
    np.testing.assert_array_equal(np.asarray(multi.tokens), np.asarray(single.tokens))
    np.testing.assert_array_equal(np.asarray(multi.valid), np.asarray(single.valid))
    np.testing.assert_allclose(np.asarray(multi.scores), np.asarray(single.scores), rtol=1e-6)
    try:
        shard_batch(np.zeros((3, 2)), mesh)
        raise AssertionError("an uneven batch was accepted")
    except ValueError as e:
        assert "not divisible" in str(e)
    print("OK", np.asarray(multi.valid).sum())
    """
)


def test_two_forced_cpu_devices_match_one():
    out = run_on_forced_cpu_devices(_SCRIPT, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("OK")


_STATIC_SCRIPT = textwrap.dedent(
    """
    import jax, numpy as np
    assert jax.device_count() == 8, jax.devices()
    from decoding import StaticConstraint, StaticIndex
    from decoding.sharding import data_mesh, device_nbytes, replicate, shard_index
    from tests.decoding.helpers import jitted_search, random_log_probs

    rng = np.random.default_rng(0)
    mesh = data_mesh(axis="index")
    V, L, K, B = 16, 5, 6, 3
    invalid = 0
    for trial, n in enumerate((3, 40, 600, 1, 200, 5)):
        # Catalogs under K items leave beams invalid (score -inf), larger ones fill all K.
        sids = rng.integers(0, V, (n, L))
        lp = random_log_probs(rng, B, L, V)
        for layout in ("csr", "compact"):
            idx = StaticIndex.build(sids, vocab_size=V, dense_levels=trial % 3, layout=layout)
            sharded = shard_index(idx, mesh)
            assert sharded.index.layout == layout
            assert len(sharded.index.tokens.sharding.device_set) == 8
            for unroll in (True, False):
                search = jitted_search(K, L, unroll)
                rep = search(lp[:, 0], {"lp": lp}, replicate(StaticConstraint(idx), mesh))
                got = search(lp[:, 0], {"lp": lp}, sharded)
                for f in ("tokens", "valid", "scores"):
                    a, b = np.asarray(getattr(rep, f)), np.asarray(getattr(got, f))
                    np.testing.assert_array_equal(b, a, err_msg=f"{f}, trial {trial}, {layout}")
                invalid += int((~np.asarray(rep.valid)).sum())
            csr = idx.row_ptr.nbytes + idx.tokens.nbytes + idx.row_base.nbytes
            per_device = max(device_nbytes(sharded).values())
            # An eighth of the CSR, give or take a quarter and the rows one block must hold
            # whole (and, compact, a partly filled word block and base per device).
            bound = idx.nbytes()["total"] - csr + 1.25 * csr / 8 + 6 * V + 64
            assert per_device <= bound, (per_device, bound, csr, layout)
    assert invalid > 0, "no trial had invalid beams"
    print("OK", invalid)
    """
)


@pytest.mark.slow
def test_sharded_static_index_gives_the_replicated_beams():
    _passes_on_8_devices(_STATIC_SCRIPT, timeout=900)


def _passes_on_8_devices(script: str, *, timeout: int) -> None:
    out = run_on_forced_cpu_devices(script, devices=8, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("OK")


_LIVE_SCRIPT = textwrap.dedent(
    """
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import PartitionSpec as P
    assert jax.device_count() == 8, jax.devices()
    from decoding import LiveConstraint, LiveIndex, add_items, set_enabled, set_membership
    from decoding import set_times
    from decoding.live import ADDED, allowed_items
    from decoding.sharding import (
        ShardedLiveConstraint, data_mesh, device_nbytes, replicate, shard_live, split_capacity
    )
    from tests.decoding.helpers import jitted_search, random_log_probs

    rng = np.random.default_rng(0)
    mesh = data_mesh(axis="index")
    V, L, K, B = 8, 4, 5, 4
    names = ("a", "b")
    search = jitted_search(K, L, True)
    seen = {"invalid": 0, "valid": 0}

    def same(rep, sh, R, t, lp, what):
        a = search(lp[:, 0], {"lp": lp}, LiveConstraint(rep, R, t))
        b = search(lp[:, 0], {"lp": lp}, ShardedLiveConstraint(sh, R, t, mesh, "index"))
        for f in ("tokens", "valid", "scores"):
            np.testing.assert_array_equal(
                np.asarray(getattr(b, f)), np.asarray(getattr(a, f)), err_msg=f"{f} {what}"
            )
        # Every valid beam is an allowed item of its row (per-request set mask and window).
        for row in range(B):
            ok = set(map(tuple, sids_all[allowed_items(rep, int(R[row]), int(t[row]))]))
            beams = np.asarray(a.tokens[row])[np.asarray(a.valid[row])]
            assert all(tuple(s) in ok for s in beams), what
        seen["valid"] += int(np.asarray(a.valid).sum())
        seen["invalid"] += int((~np.asarray(a.valid)).sum())

    def splits(index):
        # The per-item tables and the deepest child table are split over the 8 devices.
        return all(
            len(x.sharding.device_set) == 8 and x.sharding.spec == P("index")
            for x in (index.item_flags, index.item_time, index.child[-1], index.tok[-1])
        )

    for trial in range(4):
        sids = np.unique(rng.integers(0, V, (int(rng.integers(5, 300)), L)), axis=0)
        N = len(sids)
        sets, times = rng.integers(0, 4, N), rng.integers(0, 100, N)
        on = rng.random(N) < 0.8
        cap = split_capacity(LiveIndex.build(sids, vocab_size=V, set_names=names).capacity, 8)
        idx = LiveIndex.build(
            sids, vocab_size=V, set_names=names, sets=sets, times=times, enabled=on, capacity=cap
        )
        rep, sh = replicate(idx, mesh), shard_live(idx, mesh)
        assert splits(sh)
        assert max(device_nbytes(sh).values()) < max(device_nbytes(rep).values()) / 3
        new = np.unique(rng.integers(0, V, (8, L)), axis=0)
        new = new[(new[:, None] != sids[None]).any(-1).all(-1)]  # not already items
        sids_all = np.concatenate([sids, new])
        R = jnp.asarray(rng.integers(0, 4, B), jnp.int32)  # per-request set masks
        t = jnp.asarray(rng.integers(0, 90, B), jnp.int32)  # per-request freshness windows
        lp = random_log_probs(rng, B, L, V)
        same(rep, sh, R, t, lp, f"trial {trial} built")
        ids = rng.choice(N, min(6, N), replace=False)
        for fn, args in (
            (set_enabled, (ids, False)),
            (set_enabled, (ids[:2], True)),
            (set_membership, ("b", ids[2:], True)),
            (set_membership, ("a", ids[:3], False)),
            (set_times, (ids[1:], rng.integers(0, 100, len(ids) - 1))),
        ):
            rep, sh = fn(rep, *args), fn(sh, *args)
            assert splits(sh), fn
            same(rep, sh, R, t, lp, f"trial {trial} after {fn.__name__}")
        new_ids = np.arange(N, N + len(new))
        new_times = rng.integers(0, 100, len(new))
        rep, st_rep = add_items(rep, new_ids, new, times=new_times)
        sh, st_sh = add_items(sh, new_ids, new, times=new_times)
        np.testing.assert_array_equal(st_sh, st_rep)
        assert (st_rep == ADDED).all(), st_rep
        assert splits(sh)
        same(rep, sh, R, t, lp, f"trial {trial} after add_items")
    assert seen["invalid"] > 0 and seen["valid"] > 0, seen
    print("OK", seen)
    """
)


@pytest.mark.slow
def test_sharded_live_index_gives_the_replicated_beams_through_updates():
    _passes_on_8_devices(_LIVE_SCRIPT, timeout=300)


def test_shard_index_of_one_device_keeps_the_layout_and_the_beams():
    import jax
    import numpy as np

    from decoding import StaticConstraint, StaticIndex
    from decoding.sharding import shard_index
    from tests.decoding.helpers import jitted_search, random_log_probs

    rng = np.random.default_rng(0)
    sids = rng.integers(0, 40, (300, 4))
    lp = random_log_probs(rng, 2, 4, 40)
    search = jitted_search(5, 4, True)
    mesh = jax.make_mesh((1,), ("index",), axis_types=(jax.sharding.AxisType.Auto,))
    for layout in ("csr", "compact"):
        index = StaticIndex.build(sids, vocab_size=40, dense_levels=1, layout=layout)
        sharded = shard_index(index, mesh, "index")
        assert sharded.index.layout == layout
        want = search(lp[:, 0], {"lp": lp}, StaticConstraint(index))
        got = search(lp[:, 0], {"lp": lp}, sharded)
        for f in ("tokens", "valid", "scores"):
            np.testing.assert_array_equal(np.asarray(getattr(got, f)), np.asarray(getattr(want, f)))

"""Beam search on 2 forced host CPU devices (batch sharded, index replicated) equals 1 device."""

import textwrap

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

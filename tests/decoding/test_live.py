"""The live index: toggles, additions and per-request sets and windows against brute force, no
recompilation across them, and a rebuild swapped in under concurrent decoding."""

import functools
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decoding import beam_search, live
from decoding.live import (
    ADDED,
    DUPLICATE,
    NO_ROOM,
    TIME_MIN,
    LiveCapacity,
    LiveCatalog,
    LiveConstraint,
    LiveIndex,
    _insert,
    _lookup,
    _set_flags,
    add_items,
    allowed_items,
    compile_updates,
    lookup,
    set_enabled,
    set_membership,
    set_times,
)
from tests.decoding.helpers import all_sids, distinct_sids, random_log_probs, table_step

NAMES = ("in_stock", "fresh_7d", "region")
# The property test's fixed shapes: every SID of V**L fits, so one program serves all examples.
V, L, B = 3, 3, 4
FULL = LiveCapacity(items=32, nodes=(1, 3, 9), widths=(3, 3, 3))
UNIVERSE = all_sids(V, L)


@functools.cache
def _search(K: int, levels: int):
    return jax.jit(functools.partial(beam_search, table_step, beam_size=K, num_levels=levels))


def _decode(index, row_sets, row_min_time, lp):
    """Valid beams per row as sets of SID tuples (K = every SID: an exhaustive enumeration)."""
    K = lp.shape[2] ** lp.shape[1]
    c = LiveConstraint(
        index, jnp.asarray(row_sets, jnp.int32), jnp.asarray(row_min_time, jnp.int32)
    )
    res = _search(K, lp.shape[1])(jnp.asarray(lp[:, 0]), {"lp": jnp.asarray(lp)}, c)
    toks, valid = np.asarray(res.tokens), np.asarray(res.valid)
    return [
        {tuple(t) for t, ok in zip(toks[b].tolist(), valid[b], strict=True) if ok}
        for b in range(len(toks))
    ]


class Model:
    """The brute-force reference: a dict of items and their attributes."""

    def __init__(self, sids, sets, times, on):
        self.items = {
            i: [tuple(s), int(m), int(t), bool(e)]
            for i, (s, m, t, e) in enumerate(zip(sids.tolist(), sets, times, on, strict=True))
        }

    def allowed(self, R: int, t: int) -> set:
        return {s for s, m, tm, on in self.items.values() if on and m & R == R and tm >= t}


@st.composite
def scenarios(draw):
    n = draw(st.integers(1, 20))
    rows = draw(st.permutations(range(len(UNIVERSE))))
    attrs = st.tuples(st.integers(0, 7), st.integers(-3, 9), st.booleans())
    first = draw(st.lists(attrs, min_size=n, max_size=n))
    ops = draw(
        st.lists(
            st.one_of(
                st.tuples(
                    st.just("enable"), st.lists(st.integers(0, 40), max_size=5), st.booleans()
                ),
                st.tuples(
                    st.just("member"),
                    st.lists(st.integers(0, 40), max_size=5),
                    st.integers(0, 2),
                    st.booleans(),
                ),
                st.tuples(
                    st.just("time"), st.lists(st.integers(0, 40), max_size=3), st.integers(-3, 9)
                ),
                st.tuples(st.just("add"), st.lists(attrs, min_size=1, max_size=3)),
            ),
            max_size=6,
        )
    )
    requests = draw(
        st.lists(st.tuples(st.integers(0, 7), st.integers(-5, 10)), min_size=B, max_size=B)
    )
    return n, rows, first, ops, requests


@settings(max_examples=40, deadline=None)
@given(scenarios(), st.integers(0, 2**31 - 1))
def test_toggles_additions_sets_and_windows_match_brute_force(problem, seed):
    n, rows, first, ops, requests = problem
    sids = UNIVERSE[rows[:n]]
    sets, times, on = (np.array(c) for c in zip(*first, strict=True))
    index = jax.device_put(
        LiveIndex.build(
            sids, vocab_size=V, set_names=NAMES, sets=sets, times=times, enabled=on, capacity=FULL
        )
    )
    model = Model(sids, sets, times, on)
    next_row = n
    for op in ops:
        ids = [i % len(model.items) for i in op[1]] if op[0] != "add" else None
        if op[0] == "enable":
            index = set_enabled(index, ids, op[2])
            for i in ids:
                model.items[i][3] = op[2]
        elif op[0] == "member":
            index = set_membership(index, NAMES[op[2]], ids, op[3])
            for i in ids:
                m = model.items[i][1]
                model.items[i][1] = m | (1 << op[2]) if op[3] else m & ~(1 << op[2])
        elif op[0] == "time":
            index = set_times(index, ids, [op[2]] * len(ids))
            for i in ids:
                model.items[i][2] = op[2]
        else:
            new = op[1][: len(UNIVERSE) - next_row]
            if not new:
                continue
            new_ids = np.arange(len(model.items), len(model.items) + len(new))
            s, t, e = (np.array(c) for c in zip(*new, strict=True))
            index, status = add_items(
                index,
                new_ids,
                UNIVERSE[rows[next_row : next_row + len(new)]],
                sets=s,
                times=t,
                enabled=e,
            )
            assert (status == ADDED).all(), status
            for k, (m, tm, en) in enumerate(new):
                model.items[int(new_ids[k])] = [tuple(UNIVERSE[rows[next_row + k]]), m, tm, en]
            next_row += len(new)
    lp = random_log_probs(np.random.default_rng(seed), B, L, V)
    got = _decode(index, [r for r, _ in requests], [t for _, t in requests], lp)
    for b, (R, t) in enumerate(requests):
        want = model.allowed(R, t)
        assert got[b] == want, f"row {b} (sets {R:03b}, t >= {t}): decoded {got[b]}, allowed {want}"
        assert {
            tuple(sids_i) for sids_i in _sids_of(index, model, allowed_items(index, R, t))
        } == want


def _sids_of(index, model, ids):
    return [model.items[int(i)][0] for i in ids]


def test_narrow_beams_never_return_a_disallowed_item():
    rng = np.random.default_rng(0)
    V8, L3, N, K = 8, 3, 300, 4
    sids = distinct_sids(rng, N, V8, L3)
    idx = jax.device_put(
        LiveIndex.build(
            sids,
            vocab_size=V8,
            set_names=NAMES,
            sets=rng.integers(0, 8, N),
            times=rng.integers(0, 100, N),
            enabled=rng.random(N) < 0.7,
        )
    )
    idx = set_enabled(idx, rng.choice(N, 50, replace=False), False)
    row_sets, row_t = np.array([0, 1, 3, 7]), np.array([0, 50, 20, 90])
    lp = random_log_probs(rng, 4, L3, V8)
    c = LiveConstraint(idx, jnp.asarray(row_sets), jnp.asarray(row_t))
    res = _search(K, L3)(jnp.asarray(lp[:, 0]), {"lp": jnp.asarray(lp)}, c)
    for b in range(4):
        allowed = {tuple(sids[i]) for i in allowed_items(idx, row_sets[b], row_t[b])}
        beams = [
            tuple(t)
            for t, ok in zip(
                np.asarray(res.tokens[b]).tolist(), np.asarray(res.valid[b]), strict=True
            )
            if ok
        ]
        assert set(beams) <= allowed and len(beams) == min(K, len(allowed))
        assert np.all(np.asarray(res.scores[b])[len(beams) :] == -np.inf)


@pytest.mark.parametrize("leaf_slots", [0, 8, 1 << 30])
def test_stored_and_computed_maxima_decode_alike(monkeypatch, leaf_slots):
    """Maxima stored at every depth, at some, or at none (read off the items): the same beams
    after toggles, set changes, new times and additions."""
    monkeypatch.setattr(live, "_LEAF_SLOTS", leaf_slots)
    rng = np.random.default_rng(4)
    V4, L3, N = 4, 3, 40
    sids = distinct_sids(rng, N + 8, V4, L3)
    attrs = {"sets": rng.integers(0, 8, N), "times": rng.integers(0, 9, N)}
    idx = LiveIndex.build(sids[:N], vocab_size=V4, set_names=NAMES, spare=0.5, **attrs)
    assert len(idx.summary) == {0: 2, 8: 1, 1 << 30: 0}[leaf_slots]
    idx = set_enabled(idx, rng.choice(N, 10, replace=False), False)
    idx = set_membership(idx, "fresh_7d", rng.choice(N, 10, replace=False), False)
    idx = set_times(idx, np.arange(5), [9, 1, 9, 1, 9])
    idx, status = add_items(
        idx, np.arange(N, N + 8), sids[N:], sets=rng.integers(0, 8, 8), times=np.full(8, 7)
    )
    assert (status == ADDED).all()
    requests = [(0, TIME_MIN), (3, 0), (5, 7), (7, 4)]
    got = _decode(
        idx, [r for r, _ in requests], [t for _, t in requests], random_log_probs(rng, 4, L3, V4)
    )
    for b, (R, t) in enumerate(requests):
        assert got[b] == {tuple(sids[i]) for i in allowed_items(idx, R, t)}


def test_no_recompilation_across_toggles_additions_and_request_sets():
    rng = np.random.default_rng(1)
    V8, L3, N, K = 8, 3, 100, 4
    sids = distinct_sids(rng, N + 20, V8, L3)
    idx = jax.device_put(LiveIndex.build(sids[:N], vocab_size=V8, set_names=NAMES, spare=0.5))
    search = jax.jit(functools.partial(beam_search, table_step, beam_size=K, num_levels=L3))
    lp = jnp.asarray(random_log_probs(rng, 2, L3, V8))
    toggles, inserts = _set_flags._cache_size(), _insert._cache_size()
    ids = iter(range(N, N + 20))
    for step in range(6):
        # Batch sizes 5..8 share one bucket of 8; sets and values vary.
        idx = set_enabled(idx, rng.choice(N, 5 + step % 4), bool(step % 2))
        idx = set_membership(idx, NAMES[step % 3], rng.choice(N, 8 - step % 4), bool(step % 2))
        new = [next(ids), next(ids)]
        idx, status = add_items(idx, new, sids[new])
        assert (status == ADDED).all()
        c = LiveConstraint(
            idx, jnp.asarray(rng.integers(0, 8, 2)), jnp.asarray(rng.integers(-9, 9, 2))
        )
        search(lp[:, 0], {"lp": lp}, c)
    assert search._cache_size() == 1
    assert _set_flags._cache_size() - toggles <= 1  # the first call of this capacity compiles
    assert _insert._cache_size() - inserts <= 1
    np.testing.assert_array_equal(
        np.asarray(lookup(idx, sids)), np.arange(N + 12).tolist() + [-1] * 8
    )


def test_additions_and_lookups_of_any_count_share_one_compiled_program():
    """Any number of items is added and looked up by one program per capacity, compiled ahead
    by `compile_updates`; rows past a chunk see the items of the chunks before them."""
    rng = np.random.default_rng(4)
    V8, L3, N = 8, 3, 100
    sids = distinct_sids(rng, 500, V8, L3)
    idx = jax.device_put(LiveIndex.build(sids[:N], vocab_size=V8, spare=4.0))
    compile_updates(idx)
    inserts, lookups = _insert._cache_size(), _lookup._cache_size()
    at = N
    for n in (1, 3, 7):
        idx, status = add_items(idx, np.arange(at, at + n), sids[at : at + n])
        assert (status == ADDED).all()
        at += n
    # 300 rows: two chunks; the last row, in the second, repeats the first row's SID.
    new = np.concatenate([sids[at : at + 299], sids[at : at + 1]])
    idx, status = add_items(idx, np.arange(at, at + 300), new)
    assert status.tolist() == [ADDED] * 299 + [DUPLICATE]
    np.testing.assert_array_equal(np.asarray(lookup(idx, sids[: at + 299])), np.arange(at + 299))
    assert (_insert._cache_size(), _lookup._cache_size()) == (inserts, lookups)


def test_a_rebuild_warms_the_new_index_before_the_swap():
    """`warm` sees the rebuilt index (new capacity) while the old one still serves."""
    rng = np.random.default_rng(5)
    sids = distinct_sids(rng, 80, 8, 3)
    seen = []

    def warm(index):
        seen.append((index.capacity.items, cat.index.capacity.items))

    cat = LiveCatalog(sids[:40], vocab_size=8, spare=0.0, warm=warm)
    old = cat.index.capacity.items
    cat.add(sids[40:])  # past capacity: a background rebuild
    cat.wait()
    assert cat.swaps == 1 and seen == [(cat.index.capacity.items, old)]
    assert cat.index.capacity.items >= 80 > old


def test_additions_past_capacity_or_duplicates_leave_the_index_unchanged():
    sids = np.array([[0, 0], [0, 1], [1, 0]])
    idx = LiveIndex.build(
        sids, vocab_size=4, capacity=LiveCapacity(items=8, nodes=(1, 3), widths=(4, 4))
    )
    # Depth 1 has three node slots, two in use: [2, 0] takes the last, [3, 0] finds none.
    idx2, status = add_items(idx, [3, 4], np.array([[2, 0], [3, 0]]))
    assert status.tolist() == [ADDED, NO_ROOM]
    idx3, status = add_items(idx2, [4], np.array([[0, 1]]))
    assert status.tolist() == [DUPLICATE]
    for a, b in zip(jax.tree.leaves(idx2), jax.tree.leaves(idx3), strict=True):
        np.testing.assert_array_equal(a, b)
    assert np.asarray(lookup(idx3, np.array([[2, 0], [3, 0]]))).tolist() == [3, -1]


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="repeats"):
        LiveIndex.build([[0, 1], [0, 1]], vocab_size=2)
    with pytest.raises(ValueError, match="at most 5"):
        LiveIndex.build([[0, 1]], vocab_size=2, set_names=tuple("abcdef"))
    idx = LiveIndex.build([[0, 1]], vocab_size=2, set_names=("a",))
    with pytest.raises(ValueError, match="unknown set"):
        set_membership(idx, "b", [0], True)
    with pytest.raises(ValueError, match="item_ids"):
        set_enabled(idx, [idx.capacity.items], False)
    with pytest.raises(ValueError, match="too small"):
        LiveIndex.build(
            [[0, 1], [1, 1]],
            vocab_size=2,
            capacity=LiveCapacity(items=2, nodes=(1, 1), widths=(2, 2)),
        )


class _HeldCatalog(LiveCatalog):
    """A catalog whose background build waits for the test, so updates land mid-rebuild."""

    def __init__(self, *args, **kwargs):
        self.started, self.release = threading.Event(), threading.Event()
        super().__init__(*args, **kwargs)

    def _build(self, *args):
        self.started.set()
        assert self.release.wait(30)
        return super()._build(*args)


def test_swap_under_concurrent_decoding_loses_no_update():
    rng = np.random.default_rng(2)
    V8, L3, N, K = 8, 3, 60, 8
    sids = distinct_sids(rng, N + 40, V8, L3)
    cat = _HeldCatalog(sids[:N], vocab_size=V8, set_names=NAMES, spare=0.0)
    gone = np.arange(10)  # disabled before readers start, never re-enabled
    cat.set_enabled(gone, False)
    forbidden = {tuple(s) for s in sids[gone]}
    known = {tuple(s) for s in sids}
    lp = jnp.asarray(random_log_probs(rng, 2, L3, V8))
    search = _search(K, L3)
    errors, decodes, stop = [], [0], threading.Event()

    def reader():
        try:
            while not stop.is_set():
                res = search(lp[:, 0], {"lp": lp}, cat.constraint([0, 1], [TIME_MIN, TIME_MIN]))
                toks, valid = np.asarray(res.tokens), np.asarray(res.valid)
                beams = {
                    tuple(t)
                    for t, ok in zip(toks.reshape(-1, L3).tolist(), valid.reshape(-1), strict=True)
                    if ok
                }
                assert beams and beams <= known and not beams & forbidden, beams
                decodes[0] += 1
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in readers:
        t.start()
    # Past capacity (spare=0): the additions wait for a rebuild, which the test holds open.
    new_ids = cat.add(sids[N : N + 40], times=np.full(40, 5))
    assert cat.started.wait(30)
    during = np.arange(10, 20)
    cat.set_enabled(during, False)  # on the old index now, and must survive the swap
    cat.set_membership("in_stock", [20, 21], False)
    before = decodes[0]
    cat.release.set()
    cat.wait()
    while decodes[0] < before + 4 and not errors:
        threading.Event().wait(0.01)
    stop.set()
    for t in readers:
        t.join()
    assert not errors, errors[0]
    assert cat.swaps == 1 and cat.index.capacity.items >= N + 40
    assert np.asarray(lookup(cat.index, sids[N : N + 40])).tolist() == new_ids.tolist()
    flags = np.asarray(cat.index.item_flags)
    assert not (flags[during] & (1 << 30)).any() and not (flags[[20, 21]] & 1).any()
    # Exhaustive decode of the swapped index: row 0 any enabled item, row 1 in_stock and t >= 5
    # (only the added items have a time).
    got = _decode(cat.index, [0, 1], [TIME_MIN, 5], np.asarray(random_log_probs(rng, 2, L3, V8)))
    enabled = set(range(N + 40)) - set(gone) - set(during)
    assert got[0] == {tuple(sids[i]) for i in enabled}
    assert got[1] == {tuple(s) for s in sids[N:]}


def test_in_place_toggles_under_concurrent_readers():
    """in_place=True: donated updates while readers decode inside `reading()`; no reader sees a
    deleted buffer or an item disabled before its decode began."""
    rng = np.random.default_rng(3)
    V8, L3, N, K = 8, 3, 120, 8
    sids = distinct_sids(rng, N, V8, L3)
    cat = LiveCatalog(sids, vocab_size=V8, set_names=NAMES, in_place=True)
    lp = jnp.asarray(random_log_probs(rng, 2, L3, V8))
    search = _search(K, L3)
    gone = np.arange(0, N, 3)  # disabled for good before the readers start
    cat.set_enabled(gone, False)
    forbidden = {tuple(s) for s in sids[gone]}
    errors, decodes, stop = [], [0], threading.Event()

    def reader():
        try:
            while not stop.is_set():
                with cat.reading() as index:
                    c = LiveConstraint(
                        index, jnp.asarray([0, 1], jnp.int32), jnp.full(2, TIME_MIN, jnp.int32)
                    )
                    res = jax.block_until_ready(search(lp[:, 0], {"lp": lp}, c))
                toks, valid = np.asarray(res.tokens), np.asarray(res.valid)
                beams = {
                    tuple(t)
                    for t, ok in zip(toks.reshape(-1, L3).tolist(), valid.reshape(-1), strict=True)
                    if ok
                }
                assert beams and not beams & forbidden, beams
                decodes[0] += 1
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in readers:
        t.start()
    flip = np.setdiff1d(np.arange(N), gone)
    for i in range(60):  # toggle other items back and forth while the readers decode
        cat.set_enabled(flip[i % 7 :: 7], bool(i % 2))
    while decodes[0] < 10 and not errors:
        threading.Event().wait(0.01)
    stop.set()
    for t in readers:
        t.join()
    assert not errors, errors[0]
    flags = np.asarray(cat.index.item_flags)
    assert not (flags[gone] & (1 << 30)).any()
    # The last write of each residue class decides its state: 53..59 wrote True for odd i.
    for i in range(53, 60):
        assert ((flags[flip[i % 7 :: 7]] & (1 << 30)) != 0).all() == bool(i % 2)

"""The label grammar, step by step: EOS only where a label ends, no repeats, whole separators."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from decoding.label_index import LabelCapacity, LabelIndex, subset_words
from decoding.labels import LabelConstraint

V, EOS, SEP = 40, 0, (30, 31)  # a two-token separator
NEW_YORK, NEW_JERSEY, TECH, TECH_AI, BEAUTY = [10, 11], [10, 12], [20], [20, 21, 22], [25]
LABELS = [NEW_YORK, NEW_JERSEY, TECH, TECH_AI, BEAUTY]


# One capacity for every set here, so the jitted walks compile once per max_labels.
CAP = LabelCapacity(nodes=32, edges=32, labels=32, width=4)


def _constraint(max_labels=1, labels=LABELS, **kw):
    idx = LabelIndex.build(labels, vocab_size=V, capacity=CAP)
    sep = SEP if max_labels != 1 else ()
    return LabelConstraint.build(idx, eos_id=EOS, separator=sep, max_labels=max_labels, **kw)


_allowed_tokens = jax.jit(LabelConstraint.allowed_tokens)
_advance_tokens = jax.jit(LabelConstraint.advance_tokens)
_restrict = jax.jit(LabelConstraint.restrict)


def _walk(c, tokens, allowed=None):
    """Allowed-token sets before each token of one row, and the final state."""
    if allowed is not None:
        c = _restrict(c, subset_words(c.index, np.asarray([allowed])))
    state = jax.tree.map(lambda x: x[:, None], c.init_state(1))
    masks = []
    for t in [*tokens, None]:
        masks.append(set(np.flatnonzero(np.asarray(_allowed_tokens(c, state))[0, 0]).tolist()))
        if t is not None:
            state = _advance_tokens(c, state, jnp.array([[t]], jnp.int32))
    return masks, jax.tree.map(lambda x: np.asarray(x)[0, 0], state)


def test_single_label_eos_only_where_a_label_ends():
    c = _constraint()
    masks, state = _walk(c, TECH_AI + [EOS])
    assert masks[0] == {10, 20, 25}, "root: first tokens of the labels"
    assert masks[1] == {EOS, 21}, "'Technology' ends here and 'Technology > AI' goes on"
    assert masks[2] == {22}, "no label ends at 'Technology >': no EOS"
    assert masks[3] == {EOS}
    assert masks[4] == {EOS}, "after EOS only EOS (padding)"
    assert state.done and state.ok and state.count == 1
    assert np.asarray(c.label_ids(jax.tree.map(lambda x: x[None, None], state)))[0, 0, 0] == 3


def test_multi_label_never_repeats_labels_with_shared_prefixes():
    c = _constraint(max_labels=None)
    tokens = NEW_YORK + list(SEP) + [10]
    masks, _ = _walk(c, tokens)
    assert masks[2] == {EOS, SEP[0]}
    assert masks[3] == {SEP[1]}, "a separator is emitted whole: nothing else inside it"
    assert 10 in masks[4], "'New Jersey' is still available under 'New'"
    assert masks[5] == {12}, "'New York' was emitted: only 'Jersey' continues 'New'"
    masks, _ = _walk(c, TECH + list(SEP) + [20])
    assert masks[1] == {EOS, SEP[0], 21}
    assert 20 in masks[3], "'Technology > AI' is still available"
    assert masks[4] == {21}, "'Technology' was emitted: no EOS or separator after it again"


def test_max_labels_and_eos_forced_when_no_label_is_left():
    c = _constraint(max_labels=2)
    masks, state = _walk(c, BEAUTY + list(SEP) + TECH)
    assert masks[-1] == {EOS, 21}, "two labels emitted: no separator after the second"
    c = _constraint(max_labels=None, labels=[[1], [2]])
    masks, _ = _walk(c, [1, *SEP, 2])
    assert masks[0] == {1, 2} and masks[1] == {EOS, SEP[0]}
    assert masks[4] == {EOS}, "every label emitted: EOS is forced"


def test_per_row_subsets():
    c = _constraint(max_labels=None)
    allowed = np.array([False, True, True, False, False])  # New Jersey, Technology
    masks, _ = _walk(c, NEW_JERSEY + list(SEP), allowed)
    assert masks[0] == {10, 20}
    assert masks[1] == {12}, "New York is not allowed for this row"
    assert masks[2] == {EOS, SEP[0]}
    assert masks[4] == {20}
    masks, _ = _walk(c, TECH, allowed)
    assert masks[1] == {EOS, SEP[0]}, "'Technology > AI' is not allowed: no 21"
    # Subsets are in the caller's label order: New York and Beauty this time.
    masks, _ = _walk(c, NEW_YORK, allowed[[1, 0, 3, 4, 2]])
    assert masks[0] == {10, 25} and masks[1] == {11}


def test_empty_subset_allows_nothing():
    c = _constraint()
    c = _restrict(c, subset_words(c.index, np.zeros((1, len(LABELS)), bool)))
    state = jax.tree.map(lambda x: x[:, None], c.init_state(1))
    assert not np.asarray(_allowed_tokens(c, state)).any()


def test_a_token_outside_the_grammar_ends_the_row():
    masks, state = _walk(_constraint(), [10, 21])
    assert masks[2] == {EOS} and state.done and not state.ok


def test_separator_token_inside_labels_is_not_ambiguous_elsewhere():
    # Token 30 (the separator's first token) continues a label that does not end there.
    c = _constraint(max_labels=None, labels=[[1, 30, 2], [1, 30, 2, 5], [3]])
    masks, state = _walk(c, [1, 30, 2, *SEP, 3, EOS])
    assert masks[1] == {30} and masks[3] == {EOS, SEP[0], 5} and masks[6] == {EOS, SEP[0]}
    assert state.ok and state.count == 2


@pytest.mark.parametrize(
    "labels, kw, match",
    [
        ([[1, 0]], {}, "eos_id: token 0 occurs"),
        ([[1]], {"separator": (0,), "max_labels": 2}, "separator: must not contain"),
        ([[1], [1, 30]], {"separator": (30,), "max_labels": 2}, r"continues labels\[0\]"),
        ([[1]], {"max_labels": 2}, "needs a separator"),
        ([[1]], {"max_labels": 0}, "max_labels"),
        ([[1]], {"eos_id": 99}, "eos_id: tokens must be in"),
        ([[1]], {"max_steps": 0}, "max_steps"),
    ],
)
def test_bad_settings_name_the_argument(labels, kw, match):
    idx = LabelIndex.build(labels, vocab_size=V)
    with pytest.raises(ValueError, match=match):
        LabelConstraint.build(idx, **{"eos_id": EOS, **kw})


def test_unbounded_needs_a_limit_for_large_sets():
    labels = [[1 + i // 39, 1 + i % 39] for i in range(5000)]
    idx = LabelIndex.build(labels, vocab_size=200)
    with pytest.raises(ValueError, match="max_labels: None"):
        LabelConstraint.build(idx, eos_id=EOS, separator=(199,), max_labels=None)


def test_default_max_steps_bounds_the_longest_output():
    assert _constraint().max_steps == 8  # 3 tokens + EOS, rounded up to 8
    c = _constraint(max_labels=3)  # 3 labels of at most 3 tokens, 2 separators of 2 tokens: 14
    assert c.max_steps == 16


def test_masked_logits_equal_the_dense_mask_applied():
    c = _constraint(max_labels=None)
    state = jax.tree.map(
        lambda x: jnp.broadcast_to(x[:, None], (2, 2, *x.shape[1:])), c.init_state(2)
    )
    logits = jnp.asarray(np.random.default_rng(0).normal(size=(2, 2, V)), jnp.float32)
    masked = jax.jit(LabelConstraint.masked_logits)
    for tokens in ([[10, 20], [25, 20]], [[11, 21], [SEP[0], EOS]], [[SEP[0], 22], [SEP[1], EOS]]):
        want = jnp.where(_allowed_tokens(c, state), logits, -jnp.inf)
        np.testing.assert_array_equal(masked(c, state, logits), want)
        state = _advance_tokens(c, state, jnp.asarray(tokens, jnp.int32))


def _grammar_next(labels, allowed, max_labels, sep, emitted, prefix, sep_pos, done):
    """The allowed next tokens by brute force over the label list (no trie)."""
    if done:
        return {EOS}
    if sep_pos:
        return {sep[sep_pos]}
    free = [tuple(lab) for i, lab in enumerate(labels) if allowed[i] and i not in emitted]
    p = tuple(prefix)
    out = {lab[len(p)] for lab in free if len(lab) > len(p) and lab[: len(p)] == p}
    if p in free:
        out.add(EOS)
        if sep and len(emitted) + 1 < max_labels and sum(allowed) - len(emitted) > 1:
            out.add(sep[0])
    return out


def _follow(row: list, t: int, labels, sep, max_labels) -> None:
    """One brute-force row [emitted, prefix, sep_pos, done] after token t (as `_grammar_next`
    reads it)."""
    emitted, prefix, sep_pos, done = row
    if done:
        return
    if sep_pos:
        row[2] = (sep_pos + 1) % len(sep)
    elif t == EOS or (t == sep[0] and max_labels > 1):
        emitted.append(labels.index(tuple(prefix)))
        row[1], row[2], row[3] = [], int(t != EOS), t == EOS
    else:
        prefix.append(t)


@pytest.mark.parametrize("max_labels, subsets", [(1, False), (1, True), (3, True), (4, False)])
def test_bitmask_equals_brute_force_and_dense_mask(max_labels, subsets):
    # V = 70: two full words and a partial one; labels share prefixes over a few tokens and
    # reach the last word, so bits cross word boundaries.
    rng = np.random.default_rng(max_labels + 10 * subsets)
    V2, sep = 70, (1, 2)
    pool = np.array([3, 4, 5, 31, 32, 33, 63, 64, 69])
    labels = {tuple(rng.choice(pool, rng.integers(1, 4)).tolist()) for _ in range(30)}
    labels = sorted(labels)
    idx = LabelIndex.build(
        labels, vocab_size=V2, capacity=LabelCapacity(nodes=128, edges=128, labels=64, width=16)
    )
    c = LabelConstraint.build(
        idx, eos_id=EOS, separator=sep if max_labels > 1 else (), max_labels=max_labels
    )
    B2, K2 = 2, 3
    allowed = rng.random((B2, len(labels))) < (0.5 if subsets else 1.1)
    allowed[:, 0] = True
    if subsets:
        c = _restrict(c, subset_words(idx, allowed))
    state = jax.tree.map(
        lambda x: jnp.broadcast_to(x[:, None], (B2, K2, *x.shape[1:])), c.init_state(B2)
    )
    # Per row: emitted label indices, current prefix, separator position, done.
    rows = [[[], [], 0, False] for _ in range(B2 * K2)]
    logits = jnp.asarray(rng.normal(size=(B2, K2, V2)), jnp.float32)
    bitmask, masked = (
        jax.jit(LabelConstraint.allowed_bitmask),
        jax.jit(LabelConstraint.masked_logits),
    )
    for _ in range(c.max_steps):
        words = np.asarray(bitmask(c, state))
        assert words.shape == (B2, K2, 3) and words.dtype == np.uint32
        got = np.unpackbits(words.view(np.uint8), axis=-1, bitorder="little")[..., :V2] > 0
        dense = np.asarray(_allowed_tokens(c, state))
        np.testing.assert_array_equal(got, dense, "bitmask differs from the dense mask")
        want_logits = np.where(dense, np.asarray(logits), -np.inf)
        np.testing.assert_array_equal(np.asarray(masked(c, state, logits)), want_logits)
        tokens = np.zeros((B2, K2), np.int32)
        for r in range(len(rows)):
            want = _grammar_next(labels, allowed[r // K2], max_labels, sep, *rows[r])
            assert set(np.flatnonzero(got.reshape(B2 * K2, V2)[r]).tolist()) == want, r
            t = int(rng.choice(sorted(want)))
            tokens.flat[r] = t
            _follow(rows[r], t, labels, sep, max_labels)
        state = _advance_tokens(c, state, jnp.asarray(tokens))
    assert all(done for *_, done in rows), "every row reached EOS within max_steps"


@pytest.mark.parametrize("max_labels, subsets", [(1, True), (3, True), (1, False)])
def test_bitmask_of_wide_nodes_in_a_ragged_list_equals_the_dense_mask(max_labels, subsets):
    # One prefix with 300 children among nodes with few: width 512, narrow 16, so the bitmask
    # checks rows at the wide node in a ragged list (`_flat_children`) when their children fit
    # an eighth of rows x width, and with the padded width when they do not.
    rng = np.random.default_rng(max_labels + 10 * subsets)
    V2, sep = 700, (1, 2)
    wide = [(5, 10 + t) for t in range(300)]
    narrow = {tuple(rng.integers(320, 340, rng.integers(1, 4)).tolist()) for _ in range(200)}
    labels = sorted(set(wide) | narrow | {(5,)})
    idx = LabelIndex.build(labels, vocab_size=V2)
    assert (idx.capacity.narrow_width, idx.capacity.width) == (16, 512)
    c = LabelConstraint.build(
        idx, eos_id=EOS, separator=sep if max_labels > 1 else (), max_labels=max_labels
    )
    B2, K2 = 2, 3
    allowed = rng.random((B2, len(labels))) < (0.6 if subsets else 1.1)
    allowed[:, labels.index((5,))] = True
    if subsets:
        c = _restrict(c, subset_words(idx, allowed))
    state = jax.tree.map(
        lambda x: jnp.broadcast_to(x[:, None], (B2, K2, *x.shape[1:])), c.init_state(B2)
    )
    rows = [[[], [], 0, False] for _ in range(B2 * K2)]
    bitmask = jax.jit(LabelConstraint.allowed_bitmask)
    flat = jax.jit(
        lambda c, s: c._bitmask(s, 0, children=False) | c._flat_children(s, B2 * K2 * 512)
    )
    seen_wide = 0
    for _ in range(c.max_steps):
        dense = np.asarray(_allowed_tokens(c, state))
        for words in (bitmask(c, state), flat(c, state)):
            got = np.unpackbits(np.asarray(words).view(np.uint8), axis=-1, bitorder="little")
            np.testing.assert_array_equal(got[..., :V2] > 0, dense)
        tokens = np.zeros((B2, K2), np.int32)
        for r in range(len(rows)):
            want = _grammar_next(labels, allowed[r // K2], max_labels, sep, *rows[r])
            assert set(np.flatnonzero(dense.reshape(B2 * K2, V2)[r]).tolist()) == want, r
            # Walk into the wide prefix often.
            t = 5 if 5 in want and rng.random() < 0.7 else int(rng.choice(sorted(want)))
            tokens.flat[r] = t
            _follow(rows[r], t, labels, sep, max_labels)
            seen_wide += rows[r][1] == [5]
        state = _advance_tokens(c, state, jnp.asarray(tokens))
    assert seen_wide, "no row reached the wide node"


@pytest.mark.parametrize("max_labels, subsets, K", [(1, False, 4), (3, True, 4), (3, False, 1)])
def test_each_beams_best_root_tokens_give_the_picks_of_all_v(max_labels, subsets, K):
    # `root_top=K` keeps each beam's K best allowed root tokens: beam search (and greedy, K =
    # 1) picks the same parents, tokens, slots and scores as over all V, through a walk with
    # rows returning to the root after separators, dead beams and few allowed tokens.
    from decoding.beam_search import _reorder, _select

    rng = np.random.default_rng(max_labels + 10 * subsets + K)
    V2, sep = 64, (1, 2)
    labels = sorted({tuple(rng.integers(3, 40, rng.integers(1, 4)).tolist()) for _ in range(25)})
    idx = LabelIndex.build(labels, vocab_size=V2)
    c = LabelConstraint.build(
        idx, eos_id=EOS, separator=sep if max_labels > 1 else (), max_labels=max_labels
    )
    B2 = 3
    if subsets:
        allowed = rng.random((B2, len(labels))) < 0.08
        allowed[:, 0] = True
        c = _restrict(c, subset_words(idx, allowed))
    state = jax.tree.map(
        lambda x: jnp.broadcast_to(x[:, None], (B2, K, *x.shape[1:])), c.init_state(B2)
    )
    scores = jnp.zeros((B2, K)).at[:, 1:].set(-jnp.inf)  # one live beam per row at first
    pick = jax.jit(
        lambda c, s, lp, sc, level, top: _select(sc, c.candidates(level, s, lp, root_top=top), K),
        static_argnums=(4, 5),
    )
    seen = {"root later": 0, "invalid": 0}
    for step in range(c.max_steps):
        at_root = ~state.done & (state.sep_pos == 0) & (state.node == 0) & (scores > -jnp.inf)
        seen["root later"] += int(step > 0 and bool(at_root.any()))
        lp = jax.nn.log_softmax(jnp.asarray(rng.normal(size=(B2, K, V2)) * 3, jnp.float32), -1)
        full, cut = pick(c, state, lp, scores, step, None), pick(c, state, lp, scores, step, K)
        seen["invalid"] += int((~np.isfinite(np.asarray(full[3]))).sum())
        for a, b in zip(full, cut, strict=True):
            np.testing.assert_array_equal(np.asarray(b), np.asarray(a), f"step {step}")
        parent, token, aux, scores = full
        state = c.advance(step, _reorder(state, parent), token, aux)
        if not np.isfinite(np.asarray(scores)).any():
            break
    assert seen["invalid"] > 0 or not subsets, seen
    assert seen["root later"] > 0 or max_labels == 1, seen

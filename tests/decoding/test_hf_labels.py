"""The transformers adapter: the same masks as the JAX kernel, whatever the order of the calls
(beams reordered, rows going back or jumping ahead), and `model.generate` in greedy, sampling,
beam, prompt-lookup and assisted modes, called again on its output, returning only labels (a tiny
random GPT-2, a tokenizer trained here)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from decoding.label_index import LabelCapacity, LabelIndex
from decoding.label_tokens import tokenize_labels
from decoding.labels import LabelConstraint
from tests.decoding.label_helpers import CATEGORIES, train_tokenizer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from decoding.hf import LabelLogitsProcessor  # noqa: E402

V, EOS, SEP = 16, 0, (14, 15)
_allowed_tokens = jax.jit(LabelConstraint.allowed_tokens)
_advance_tokens = jax.jit(LabelConstraint.advance_tokens)
_label_ids = jax.jit(LabelConstraint.label_ids)


LABELS = [[1, 2], [1], [1, 2, 3], [4], [1, 3], [4, 5, 5], [6, 14, 7]]
B, K, P = 2, 3, 2  # prompts, rows per prompt (beams or samples), prompt length


def _constraints(labels, max_labels, subsets, rng):
    """The JAX constraint and the torch processor of the same grammar and subsets."""
    idx = LabelIndex.build(
        labels, vocab_size=V, capacity=LabelCapacity(nodes=64, edges=64, labels=32, width=8)
    )
    sep = SEP if max_labels != 1 else ()
    c = LabelConstraint.build(idx, eos_id=EOS, separator=sep, max_labels=max_labels)
    allowed = rng.random((B, len(labels))) < 0.6 if subsets else None
    if subsets:
        allowed[:, 0] = True
        c = c.restrict(allowed)
    proc = LabelLogitsProcessor(
        idx, eos_token_id=EOS, separator=sep, max_labels=max_labels, allowed=allowed
    )
    return c, proc


def _jax_init(c):
    return jax.tree.map(
        lambda x: jnp.broadcast_to(x[:, None], (B, K, *x.shape[1:])), c.init_state(B)
    )


def _random_walk_agrees(labels, max_labels, subsets, seed):
    rng = np.random.default_rng(seed)
    c, proc = _constraints(labels, max_labels, subsets, rng)
    state = _jax_init(c)
    ids = torch.as_tensor(rng.integers(1, V, (B, 1, P))).repeat(1, K, 1).reshape(B * K, P)
    first = None
    for _ in range(c.max_steps + 1):
        mask = np.asarray(_allowed_tokens(c, state)).reshape(B * K, V)
        got = torch.isfinite(proc(ids, torch.zeros(B * K, V))).numpy()
        first = mask if first is None else first
        want = np.asarray(_label_ids(c, state)).reshape(B * K, -1)
        np.testing.assert_array_equal(proc.labels().numpy(), want, "labels() differ")
        if np.asarray(state.done).all():
            # `generate` stops here; a further call (a new generate() extending the output)
            # starts over at the root.
            np.testing.assert_array_equal(got, first, "rows that all finished did not restart")
            break
        np.testing.assert_array_equal(got, mask, "torch and JAX masks differ")
        # Pick an allowed token per row, then reorder rows within each prompt like beams do.
        tok = np.array([rng.choice(np.flatnonzero(m)) for m in mask]).reshape(B, K)
        state = _advance_tokens(c, state, jnp.asarray(tok, jnp.int32))
        perm = np.stack([rng.integers(0, K, K) for _ in range(B)])
        state = jax.tree.map(lambda x, p=perm: np.asarray(x)[np.arange(B)[:, None], p], state)
        rows = (perm + np.arange(B)[:, None] * K).reshape(-1)
        ids = torch.cat([ids, torch.as_tensor(tok.reshape(-1, 1))], 1)[torch.as_tensor(rows)]
    assert np.asarray(state.done).all()


@pytest.mark.parametrize(
    "max_labels, subsets",
    [
        (1, False),
        pytest.param(3, True, marks=pytest.mark.slow),
        pytest.param(None, False, marks=pytest.mark.slow),
    ],
)
def test_torch_masks_equal_jax_masks_under_beam_reordering(max_labels, subsets):
    _random_walk_agrees(LABELS, max_labels, subsets, seed=max_labels or 0)


@pytest.mark.parametrize("max_labels, subsets", [(1, False), (1, True), (3, True)])
def test_inplace_processor_masks_the_given_scores_as_the_copying_one_does(max_labels, subsets):
    rng = np.random.default_rng(7)
    c, copying = _constraints(LABELS, max_labels, subsets, rng)
    inplace = LabelLogitsProcessor(
        c.index,
        eos_token_id=EOS,
        separator=c.separator,
        max_labels=c.max_labels,
        allowed=None if copying.allowed is None else _allowed_of(copying, c),
        inplace=True,
    )
    state = _jax_init(c)
    ids = torch.as_tensor(rng.integers(1, V, (B, 1, P))).repeat(1, K, 1).reshape(B * K, P)
    while not np.asarray(state.done).all():
        scores = torch.as_tensor(rng.normal(size=(B * K, V)).astype(np.float32))
        want = copying(ids, scores.clone())
        got = inplace(ids, scores)
        assert got.data_ptr() == scores.data_ptr(), "the in-place processor copied the scores"
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        mask = np.asarray(_allowed_tokens(c, state)).reshape(B * K, V)
        np.testing.assert_array_equal(np.isfinite(got.numpy()), mask)
        tok = np.array([rng.choice(np.flatnonzero(m)) for m in mask]).reshape(B, K)
        state = _advance_tokens(c, state, jnp.asarray(tok, jnp.int32))
        ids = torch.cat([ids, torch.as_tensor(tok.reshape(-1, 1))], 1)


def _allowed_of(proc, c):
    """The caller-order subsets of a processor built by `_constraints`."""
    trie = proc.allowed.numpy()
    order = np.asarray(c.index.label_order)[: trie.shape[1]]
    allowed = np.zeros_like(trie)
    allowed[:, order] = trie
    return allowed


@pytest.mark.parametrize("max_labels, subsets", [(1, False), (3, True)])
def test_rows_that_go_back_or_grow_by_several_tokens_get_the_jax_masks(max_labels, subsets):
    # Assisted and prompt-lookup decoding re-score drafted tokens (shorter rows) and accept
    # several at once; rows are states of their tokens, whatever the order of the calls.
    rng = np.random.default_rng(max_labels)
    c, proc = _constraints(LABELS, max_labels, subsets, rng)
    state, toks, masks = _jax_init(c), [], []
    while not np.asarray(state.done).all():
        masks.append(np.asarray(_allowed_tokens(c, state)).reshape(B * K, V))
        tok = np.array([rng.choice(np.flatnonzero(m)) for m in masks[-1]]).reshape(B, K)
        toks.append(tok.reshape(-1))
        state = _advance_tokens(c, state, jnp.asarray(tok, jnp.int32))
    outputs, T = np.stack(toks, 1), len(toks)  # [B * K, T]: complete outputs
    masks.append(masks[0])  # once every row has finished, rows start over
    prompt = rng.integers(1, V, (B, 1, P)).repeat(K, 1).reshape(B * K, P)
    g, lengths = 0, []
    for call in range(40):
        perm = np.stack([rng.permutation(K) for _ in range(B)]) + np.arange(B)[:, None] * K
        rows = perm.reshape(-1)
        ids = torch.as_tensor(np.concatenate([prompt, outputs[rows, :g]], 1))
        got = torch.isfinite(proc(ids, torch.zeros(B * K, V))).numpy()
        np.testing.assert_array_equal(got, masks[g][rows], f"call {call}, {g} tokens")
        lengths.append(g)
        g = int(np.clip(g + rng.integers(-3, 5), 0, T))
    steps = np.diff(lengths)
    assert (steps < 0).any() and (steps > 1).any(), "the calls went back and jumped ahead"


def test_tokens_after_the_first_unmasked_one_must_follow_the_grammar():
    proc = LabelLogitsProcessor(LabelIndex.build(LABELS, vocab_size=V), eos_token_id=EOS)
    prompt = torch.tensor([[9, 9], [9, 8]])

    def allowed(*rows):
        ids = torch.cat([prompt, torch.tensor(rows, dtype=torch.int64).reshape(2, -1)], 1)
        got = torch.isfinite(proc(ids, torch.zeros(2, V)))
        return [set(np.flatnonzero(r).tolist()) for r in got.numpy()]

    assert allowed([], []) == [{1, 4, 6}] * 2
    with pytest.raises(ValueError, match=r"row 1 continues the last call by 2 tokens, and token 9"):
        allowed([1, 2], [4, 9])
    # Two tokens at once, both in the grammar: walked as if fed one at a time.
    assert allowed([1, 2], [4, 5]) == [{EOS, 3}, {5}]
    # A first new token outside the grammar was the search's own pick of a -inf candidate (beam
    # search keeps such beams when too few are allowed): that row just ends.
    assert allowed([1, 2, 9], [4, 5, 5]) == [{EOS}, {EOS}]


@pytest.fixture(scope="module")
def setup():
    tok = train_tokenizer()
    eos = tok.token_to_id("<eos>")
    labels = tokenize_labels(CATEGORIES, tok)
    assert labels.ok
    index = LabelIndex.build(labels.token_ids, vocab_size=tok.get_vocab_size())
    index.verify(labels.token_ids)
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        vocab_size=tok.get_vocab_size(),
        n_positions=64,
        n_embd=32,
        n_layer=1,
        n_head=2,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=eos,
    )
    model = transformers.GPT2LMHeadModel(cfg).eval()
    # The same prompt twice, with different label subsets below.
    prompts = torch.tensor([tok.encode("Category:").ids] * 2)
    return tok, eos, labels.token_ids, index, model, prompts


@pytest.fixture(scope="module")
def assistant(setup):
    tok, eos = setup[:2]
    torch.manual_seed(1)
    cfg = transformers.GPT2Config(
        vocab_size=tok.get_vocab_size(),
        n_positions=64,
        n_embd=16,
        n_layer=1,
        n_head=2,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=eos,
    )
    return transformers.GPT2LMHeadModel(cfg).eval()


def _outputs(out, prompt_len, eos, sep):
    """Each generated row as a list of label token tuples, or None if it is not well formed."""
    rows = []
    for row in out[:, prompt_len:].tolist():
        if eos not in row:
            rows.append(None)
            continue
        body, parts, cur, i = row[: row.index(eos)], [], [], 0
        while i < len(body):
            if sep and tuple(body[i : i + len(sep)]) == sep:
                parts.append(tuple(cur))
                cur, i = [], i + len(sep)
            else:
                cur.append(body[i])
                i += 1
        rows.append([*parts, tuple(cur)])
    return rows


@pytest.mark.parametrize(
    "kw",
    [
        {"do_sample": False},
        {"do_sample": True, "num_return_sequences": 3, "top_k": 5, "temperature": 2.0},
        {"do_sample": False, "num_beams": 4, "num_return_sequences": 2},
    ],
    ids=["greedy", "sample", "beam"],
)
@pytest.mark.parametrize("multi", [False, True])
def test_generate_returns_only_labels(setup, kw, multi):
    tok, eos, label_ids, index, model, prompts = setup
    sep = tuple(tok.encode(";").ids) if multi else ()
    allowed = np.ones((2, len(label_ids)), bool)
    allowed[1, :5] = False  # the second prompt may not use the Beauty labels
    proc = LabelLogitsProcessor(
        index, eos_token_id=eos, separator=sep, max_labels=3 if multi else 1, allowed=allowed
    )
    torch.manual_seed(1)
    out = model.generate(
        prompts,
        attention_mask=torch.ones_like(prompts),
        logits_processor=[proc],
        max_new_tokens=40 if multi else 12,
        pad_token_id=eos,
        **kw,
    )
    known = {tuple(t): i for i, t in enumerate(label_ids)}
    per_prompt = out.shape[0] // 2
    for r, parts in enumerate(_outputs(out, prompts.shape[1], eos, sep)):
        assert parts is not None, f"row {r} did not finish: {tok.decode(out[r].tolist())!r}"
        got = [known.get(p) for p in parts]
        assert None not in got, f"not a label: {tok.decode(out[r].tolist())!r}"
        assert len(set(got)) == len(got) <= (3 if multi else 1)
        assert allowed[r // per_prompt, got].all(), "a label outside the prompt's subset"


def test_processor_checks_its_arguments(setup):
    tok, eos, label_ids, index, model, prompts = setup
    with pytest.raises(ValueError, match="allowed"):
        LabelLogitsProcessor(index, eos_token_id=eos, allowed=np.ones((2, 3), bool))
    # An empty subset would leave a row all -inf: NaN probabilities, a torch error in sampling.
    allowed = np.ones((3, len(label_ids)), bool)
    allowed[1] = False
    with pytest.raises(ValueError, match=r"allowed: row 1 allows no label"):
        LabelLogitsProcessor(index, eos_token_id=eos, allowed=allowed)
    proc = LabelLogitsProcessor(index, eos_token_id=eos)
    with pytest.raises(ValueError, match="scores"):
        proc(prompts, torch.zeros(2, 5))


def _is_label(out, prompt_len, eos, label_ids) -> bool:
    known = {tuple(t) for t in label_ids}
    return all(
        p is not None and len(p) == 1 and p[0] in known for p in _outputs(out, prompt_len, eos, ())
    )


@pytest.mark.parametrize(
    "kw",
    [
        {"prompt_lookup_num_tokens": 3, "do_sample": False},
        {"prompt_lookup_num_tokens": 3, "do_sample": True},
        {"assisted": True, "do_sample": True},
    ],
    ids=["lookup-greedy", "lookup-sample", "assisted-sample"],
)
def test_prompt_lookup_and_assisted_generate_return_only_labels(setup, assistant, kw):
    tok, eos, label_ids, index, model, _ = setup
    if kw.pop("assisted", False):
        kw["assistant_model"] = assistant
    # Label text in the prompt gives prompt lookup drafts to propose.
    text = "Category: Beauty > Skin Care > Face; Toys & Games > Puzzles. Category:"
    prompt = torch.tensor([tok.encode(text).ids])
    for seed in range(2 if kw["do_sample"] else 1):
        proc = LabelLogitsProcessor(index, eos_token_id=eos)
        torch.manual_seed(seed)
        out = model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            logits_processor=[proc],
            max_new_tokens=12,
            pad_token_id=eos,
            **kw,
        )
        generated = tok.decode(out[0, prompt.shape[1] :].tolist())
        assert _is_label(out, prompt.shape[1], eos, label_ids), f"seed {seed}: {generated!r}"


@pytest.mark.parametrize("kw", [{"do_sample": False}, {"num_beams": 3}], ids=["greedy", "beam"])
def test_a_new_generate_call_may_extend_the_last_output(setup, kw):
    tok, eos, label_ids, index, model, prompts = setup
    proc = LabelLogitsProcessor(index, eos_token_id=eos)

    def generate(p):
        return model.generate(
            p,
            attention_mask=torch.ones_like(p),
            logits_processor=[proc],
            max_new_tokens=12,
            pad_token_id=eos,
            **kw,
        )

    out = generate(prompts[:1])
    # Once every row has finished, the next call starts over: on the output itself, or on the
    # output extended by a new prompt.
    for p in (out, torch.cat([out, prompts[:1]], 1)):
        again = generate(p)
        generated = tok.decode(again[0, p.shape[1] :].tolist())
        assert _is_label(again, p.shape[1], eos, label_ids), f"{generated!r} after {p.tolist()}"


def test_a_new_prompt_extending_an_unfinished_output_needs_reset(setup):
    tok, eos, label_ids, index, model, prompts = setup
    proc = LabelLogitsProcessor(index, eos_token_id=eos)
    kw = {"logits_processor": [proc], "pad_token_id": eos, "do_sample": False}
    p = prompts[:1]
    cut = model.generate(p, attention_mask=torch.ones_like(p), max_new_tokens=1, **kw)
    p = torch.cat([cut, p], 1)  # a label without its EOS, then a new prompt
    kw.update(attention_mask=torch.ones_like(p), max_new_tokens=12)
    with pytest.raises(ValueError, match=r"row 0 continues the last call .* call reset\(\)"):
        model.generate(p, **kw)
    proc.reset()
    out = model.generate(p, **kw)
    assert _is_label(out, p.shape[1], eos, label_ids), tok.decode(out[0].tolist())


@pytest.mark.parametrize("max_labels, subsets", [(1, False), (1, True), (3, True)])
def test_first_step_with_few_open_tokens_copies_them_into_minus_inf(max_labels, subsets):
    # Labels start with a few of V = 512 tokens: the first step fills -inf and copies the open
    # tokens back (`root_open`); the masks equal the JAX kernel's through a walk.
    Vw = 512
    labels = [[3, 7], [3], [9, 400], [500, 2, 2], [9], [40, 41]]
    idx = LabelIndex.build(labels, vocab_size=Vw)
    sep = (510, 511) if max_labels != 1 else ()
    rng = np.random.default_rng(max_labels)
    allowed = None
    c = LabelConstraint.build(idx, eos_id=EOS, separator=sep, max_labels=max_labels)
    if subsets:
        allowed = rng.random((B, len(labels))) < 0.5
        allowed[:, 0] = True
        c = c.restrict(allowed)
    procs = [
        LabelLogitsProcessor(
            idx, eos_token_id=EOS, separator=sep, max_labels=max_labels, allowed=allowed, inplace=i
        )
        for i in (False, True)
    ]
    assert all(p.root_open is not None for p in procs)
    state = jax.tree.map(
        lambda x: jnp.broadcast_to(x[:, None], (B, K, *x.shape[1:])), c.init_state(B)
    )
    ids = torch.as_tensor(rng.integers(1, Vw, (B, 1, P))).repeat(1, K, 1).reshape(B * K, P)
    while not np.asarray(state.done).all():
        mask = np.asarray(jax.jit(LabelConstraint.allowed_tokens)(c, state)).reshape(B * K, Vw)
        scores = torch.as_tensor(rng.normal(size=(B * K, Vw)).astype(np.float32))
        outs = [p(ids, scores.clone()) for p in procs]
        np.testing.assert_array_equal(outs[0].numpy(), outs[1].numpy())
        np.testing.assert_array_equal(outs[0].numpy(), np.where(mask, scores.numpy(), -np.inf))
        tok = np.array([rng.choice(np.flatnonzero(m)) for m in mask]).reshape(B, K)
        state = _advance_tokens(c, state, jnp.asarray(tok, jnp.int32))
        ids = torch.cat([ids, torch.as_tensor(tok.reshape(-1, 1))], 1)

"""The transformers adapter: the same masks as the JAX kernel, and `model.generate` in greedy,
sampling and beam modes returning only labels (a tiny random GPT-2, a tokenizer trained here)."""

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


def _random_walk_agrees(labels, max_labels, subsets, seed):
    rng = np.random.default_rng(seed)
    idx = LabelIndex.build(
        labels, vocab_size=V, capacity=LabelCapacity(nodes=64, edges=64, labels=32, width=8)
    )
    sep = SEP if max_labels != 1 else ()
    c = LabelConstraint.build(idx, eos_id=EOS, separator=sep, max_labels=max_labels)
    B, K, P = 2, 3, 2
    allowed = rng.random((B, len(labels))) < 0.6 if subsets else None
    if subsets:
        allowed[:, 0] = True
        c = c.restrict(allowed)
    proc = LabelLogitsProcessor(
        idx, eos_token_id=EOS, separator=sep, max_labels=max_labels, allowed=allowed
    )
    state = jax.tree.map(
        lambda x: jnp.broadcast_to(x[:, None], (B, K, *x.shape[1:])), c.init_state(B)
    )
    ids = torch.as_tensor(rng.integers(1, V, (B, 1, P))).repeat(1, K, 1).reshape(B * K, P)
    for _ in range(c.max_steps):
        mask = np.asarray(_allowed_tokens(c, state)).reshape(B * K, V)
        got = torch.isfinite(proc(ids, torch.zeros(B * K, V))).numpy()
        np.testing.assert_array_equal(got, mask, "torch and JAX masks differ")
        # Pick an allowed token per row, then reorder rows within each prompt like beams do.
        tok = np.array([rng.choice(np.flatnonzero(m)) for m in mask]).reshape(B, K)
        state = _advance_tokens(c, state, jnp.asarray(tok, jnp.int32))
        perm = np.stack([rng.integers(0, K, K) for _ in range(B)])
        state = jax.tree.map(lambda x, p=perm: np.asarray(x)[np.arange(B)[:, None], p], state)
        rows = (perm + np.arange(B)[:, None] * K).reshape(-1)
        ids = torch.cat([ids, torch.as_tensor(tok.reshape(-1, 1))], 1)[torch.as_tensor(rows)]
    assert np.asarray(state.done).all()
    np.testing.assert_array_equal(
        proc.labels().numpy(), np.asarray(c.label_ids(state)).reshape(B * K, -1)
    )


@pytest.mark.parametrize(
    "max_labels, subsets",
    [
        (1, False),
        pytest.param(3, True, marks=pytest.mark.slow),
        pytest.param(None, False, marks=pytest.mark.slow),
    ],
)
def test_torch_masks_equal_jax_masks_under_beam_reordering(max_labels, subsets):
    labels = [[1, 2], [1], [1, 2, 3], [4], [1, 3], [4, 5, 5], [6, 14, 7]]
    _random_walk_agrees(labels, max_labels, subsets, seed=max_labels or 0)


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
    proc = LabelLogitsProcessor(index, eos_token_id=eos)
    with pytest.raises(ValueError, match="scores"):
        proc(prompts, torch.zeros(2, 5))

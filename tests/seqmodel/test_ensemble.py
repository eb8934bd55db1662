"""Ensembles of retrievers: the mixture rule scores every SID by the log of the members' mean
joint probability, exactly; the product rule is a different ranking; one member is that member."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from decoding import Unconstrained
from seqmodel.inference import ensemble_decoder
from seqmodel.item_model import ItemDecoder
from seqmodel.tokens import encode_history, sid_tokens
from tests.seqmodel.conftest import NUM_LEVELS, V, random_unique_sids

L = NUM_LEVELS
ALL = V**L  # a beam as wide as the SID space keeps every SID, so its scores are exact


@pytest.fixture(scope="module")
def members(tiny_cfg, space):
    cfg = dataclasses.replace(tiny_cfg, arch="item")
    return [nnx.jit(lambda s=s: ItemDecoder(cfg, space, rngs=nnx.Rngs(s)))() for s in (0, 1)]


@pytest.fixture(scope="module")
def histories(tiny_cfg):
    tok = sid_tokens(random_unique_sids(10, L, V, 0), V)
    rows = [np.array([3, 1, 4]), np.array([7, 2]), np.array([5])]
    return jnp.asarray(np.stack([encode_history(tok, r, tiny_cfg.max_history - 1) for r in rows]))


def _scores_by_sid(models, histories, rule):
    """{(row, SID): score} of a full-width unconstrained beam search of the ensemble."""
    res = ensemble_decoder(models, Unconstrained(V, L), beam_size=ALL, rule=rule)(histories)
    tokens, scores, valid = (np.asarray(x) for x in (res.tokens, res.scores, res.valid))
    assert valid.all()  # every one of the V**L SIDs is a beam
    return {
        (b, tuple(t)): float(s)
        for b in range(len(tokens))
        for t, s in zip(tokens[b].tolist(), scores[b].tolist(), strict=True)
    }


def test_mixture_scores_are_the_members_mean_joint_probability(members, histories):
    # Each member alone (a one-member ensemble is that model's joint log-probability).
    alone = [_scores_by_sid([m], histories, "product") for m in members]
    for a in alone:
        assert len(a) == len(histories) * ALL
        for b in range(len(histories)):  # normalized: the SIDs' probabilities sum to one per row
            total = np.logaddexp.reduce([s for (r, _), s in a.items() if r == b])
            assert total == pytest.approx(0.0, abs=1e-4)
    mixture = _scores_by_sid(members, histories, "mixture")
    want = {k: float(np.logaddexp(alone[0][k], alone[1][k]) - np.log(2)) for k in alone[0]}
    assert mixture.keys() == want.keys()
    np.testing.assert_allclose([mixture[k] for k in want], list(want.values()), atol=1e-4)
    # The product rule ranks otherwise: per level, the members' log-probs averaged, renormalised.
    product = _scores_by_sid(members, histories, "product")
    assert max(abs(product[k] - want[k]) for k in want) > 1e-2


def test_one_member_mixture_is_that_member(members, histories):
    alone = _scores_by_sid(members[:1], histories, "product")
    mixture = _scores_by_sid(members[:1], histories, "mixture")
    np.testing.assert_allclose([mixture[k] for k in alone], list(alone.values()), atol=1e-5)


def test_unknown_rule_is_rejected(members):
    with pytest.raises(ValueError, match="ensemble rule 'mean'"):
        ensemble_decoder(members, Unconstrained(V, L), beam_size=4, rule="mean")


def test_retrieval_fn_is_the_beam_search_over_the_models_step(members, histories):
    # One model: make_decoder's program gives the plain beam search's beams to the last bit.
    # A list of two: the ensemble, the same as ensemble_decoder's.
    import jax

    from decoding import beam_search
    from seqmodel.inference import retrieval_fn

    c = Unconstrained(V, L)
    graphdef, params = nnx.split(members[0])

    @jax.jit
    def direct(params, tokens):
        m = nnx.merge(graphdef, params)
        lp, cache = m.prefill(tokens)
        return beam_search(m.step, lp, cache, c, beam_size=4, num_levels=L)

    want = direct(params, histories)
    got = retrieval_fn(members[0], c, beam_size=4)(histories)
    np.testing.assert_array_equal(got.tokens, want.tokens)
    np.testing.assert_array_equal(got.scores, want.scores)
    pair = retrieval_fn(members, c, beam_size=4, rule="mixture")(histories)
    ens = ensemble_decoder(members, c, beam_size=4, rule="mixture")(histories)
    np.testing.assert_array_equal(pair.scores, ens.scores)
    assert not np.array_equal(pair.scores, want.scores)

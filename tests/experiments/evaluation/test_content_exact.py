"""static_content with eval.cold_content_exact: its top K beams and scores are those of a
brute-force scoring of every cold item (the retriever's level scores, teacher-forced, plus the
content prior's log-softmax), and the option reaches the results JSON."""

import json

import jax
import numpy as np
import pytest
from scipy.special import logsumexp

from experiments import cli, config
from tests.experiments.evaluation.test_cold_start import TRAIN_FAST, workdir  # noqa: F401


def _trained(workdir):  # noqa: F811
    if not (workdir / "retriever_cold_0.05" / "train_summary.json").exists():
        train = ["train-retriever", "--workdir", str(workdir), "--cold-start", "0.05"]
        assert cli.main([*train, "--no-progress", *TRAIN_FAST]) == 0


def _brute_scores(model, inputs, item_tokens, sids, scoring, log_prior):
    """[U, C] scores: sum_l w_l log p(c_l | history, c_<lev) + the scoring's biases + log_prior,
    each item's log-probs read from one full forward pass over the history and its codes."""
    L = sids.shape[1]
    weights, first, bias = (
        np.asarray(a) for a in (scoring.weights, scoring.first_bias, scoring.bias)
    )
    out = np.zeros(log_prior.shape)
    T = inputs.shape[1]
    for u in range(len(inputs)):
        seq = np.concatenate(
            [np.repeat(inputs[u][None], len(sids), 0), item_tokens[:, : L - 1]], axis=1
        )
        logits = np.asarray(model(jax.numpy.asarray(seq)), np.float64)  # [C, T + L - 1, L, V]
        lp = [
            logits[np.arange(len(sids)), T - 1 + lev, lev]
            - logsumexp(logits[:, T - 1 + lev, lev], axis=1, keepdims=True)
            for lev in range(L)
        ]
        s = sum(weights[lev] * lp[lev][np.arange(len(sids)), sids[:, lev]] for lev in range(L))
        s = (
            s
            + first[sids[:, 0]]
            + sum(bias[lev - 1, sids[:, lev - 1], sids[:, lev]] for lev in range(1, L))
        )
        out[u] = s + log_prior[u]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("prior_weight", [0.0, 0.5])
def test_exact_content_prior_equals_brute_force(workdir, prior_weight):  # noqa: F811
    from data.splits import cold_start_split
    from decoding import StaticConstraint, StaticIndex
    from experiments.evaluation.baselines import content_queries, cosines
    from experiments.evaluation.metrics import SIDLookup
    from experiments.evaluation.retrieval import (
        _content_inputs,
        cold_scoring,
        content_prior_method,
        evaluated_inputs,
        load_inputs,
    )
    from experiments.pipeline.artifacts import load_retriever
    from experiments.pipeline.layout import RunLayout, Split
    from seqmodel.tokens import sid_tokens

    _trained(workdir)
    layout = RunLayout(workdir)
    cfg = config.apply_overrides(
        config.load_json(layout.config),
        [
            "eval.cold_content_weight=2",
            "eval.cold_content_temperature=0.05",
            "eval.cold_content_exact=true",
            "eval.beam_size=3",
            f"eval.cold_prior_weight={prior_weight}",
            "eval.cold_level_weights=1,0.5,0.25,1",
        ],
    )
    ds, sids = load_inputs(cfg, layout)
    split = cold_start_split(ds, 0.05)
    which = Split("cold", 0.05)
    model = load_retriever(layout, which)
    V = model.space.codebook_size
    _, inputs = evaluated_inputs(model, sids, split, cfg.eval, layout.retriever(which))
    cold_sids = sids[split.cold_items]
    C, K = len(cold_sids), cfg.eval.beam_size
    assert C > 3 * K  # a beam of K alone would prune
    static = StaticConstraint(StaticIndex.build(cold_sids, vocab_size=V))
    scoring = cold_scoring(cfg.eval, split.train, sids, V)
    emb, histories = _content_inputs(cfg, layout, ds, split)
    fn, rows = content_prior_method(cfg, split, model, cold_sids, static, scoring, emb, histories)
    U = 12
    res = fn(inputs[:U], rows[:U])
    assert np.asarray(res.tokens).shape[:2] == (U, K)
    got_items = SIDLookup(sids, V)(np.asarray(res.tokens))
    unit, queries = content_queries(emb, histories)
    logit = cosines(queries[:U], unit[split.cold_items].T) / cfg.eval.cold_content_temperature
    log_prior = cfg.eval.cold_content_weight * (logit - logsumexp(logit, axis=1, keepdims=True))
    want = _brute_scores(model, inputs[:U], sid_tokens(cold_sids, V), cold_sids, scoring, log_prior)
    order = np.argsort(-want, axis=1, kind="stable")[:, :K]
    np.testing.assert_allclose(
        np.asarray(res.scores), np.take_along_axis(want, order, 1), rtol=1e-4, atol=1e-3
    )
    # Items match wherever the brute-force scores are not tied within float error.
    gaps = -np.diff(np.take_along_axis(want, np.argsort(-want, axis=1)[:, : K + 1], 1), axis=1)
    clear = (gaps > 1e-3).all(axis=1)
    assert clear.sum() >= U // 2
    np.testing.assert_array_equal(got_items[clear], split.cold_items[order][clear])


def test_exact_reaches_the_results_and_the_report(workdir):  # noqa: F811
    _trained(workdir)
    argv = ["eval-cold-start", "--workdir", str(workdir), "--cold-start", "0.05", "--no-progress"]
    on = ["--set", "eval.cold_content_weight=1", "--set", "eval.cold_content_exact=true"]
    path = workdir / "results" / "cold_start_0.05.json"
    try:
        assert cli.main([*argv, *on]) == 0
        res = json.loads(path.read_text())
        assert res["scoring"]["content_exact"] is True
        m = res["methods"]["static_content"]
        assert m["valid_rate"] == 1.0 and m["cold_rate"] == 1.0
    finally:  # later tests in the shared module fixture expect no content prior
        assert cli.main([*argv, "--set", "eval.cold_content_weight=0"]) == 0

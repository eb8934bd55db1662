"""The content prior in STATIC's cold-start beams: row inputs, cosines, config checks, keys."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from data.errors import ArgumentError
from data.types import Histories
from decoding import BeamResult
from experiments import config as config_lib
from experiments.evaluation import decode as evaluate
from experiments.evaluation import metrics
from experiments.evaluation.baselines import content_queries, content_ranking
from experiments.pipeline.layout import RunLayout
from experiments.pipeline.workflow import build_stages

SIDS = np.array([[0, 0], [0, 1], [1, 0], [1, 1]])


def test_row_inputs_reach_their_method_batched_and_padded_like_the_tokens():
    seen = []

    def with_rows(batch, rows):
        seen.append((batch.copy(), rows.copy()))
        B = len(batch)
        tokens = np.zeros((B, 1, 2), np.int32)
        tokens[:, 0, 1] = rows[:, 0]  # the row input picks the item
        return BeamResult(jnp.asarray(tokens), jnp.zeros((B, 1)), jnp.ones((B, 1), bool))

    def plain(batch):
        B = len(batch)
        return BeamResult(
            jnp.zeros((B, 1, 2), jnp.int32), jnp.zeros((B, 1)), jnp.ones((B, 1), bool)
        )

    inputs = np.arange(5)[:, None].astype(np.int32)
    rows = (np.arange(5) % 2)[:, None]
    out = evaluate.decode_interleaved(
        {"a": plain, "b": with_rows},
        inputs,
        metrics.SIDLookup(SIDS, 2),
        batch_size=2,
        row_inputs={"b": rows},
    )
    np.testing.assert_array_equal(out["b"].items[:, 0], np.arange(5) % 2)
    np.testing.assert_array_equal(out["a"].items[:, 0], 0)
    # Warm-up + 3 batches; the last is padded by repeating user 4 in both arrays alike.
    batch, r = seen[-1]
    np.testing.assert_array_equal(batch[:, 0], [4, 4])
    np.testing.assert_array_equal(r[:, 0], [0, 0])
    with pytest.raises(ValueError, match=r"row_inputs\['b'\]: 4 rows for 5 users"):
        evaluate.decode_interleaved(
            {"b": with_rows},
            inputs,
            metrics.SIDLookup(SIDS, 2),
            batch_size=2,
            row_inputs={"b": rows[:4]},
        )
    with pytest.raises(ValueError, match="unknown methods"):
        evaluate.decode_interleaved(
            {"a": plain}, inputs, metrics.SIDLookup(SIDS, 2), batch_size=2, row_inputs={"x": rows}
        )


def test_cosines_rank_as_the_content_baseline_ranks():
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(30, 8))
    hist = Histories.from_lists([rng.choice(30, n).tolist() for n in (1, 3, 5, 7)])
    cand = np.array([3, 9, 12, 20, 25, 29])
    unit_all, query = content_queries(emb, hist)
    cos = query @ unit_all[cand].T
    assert cos.shape == (4, 6) and np.abs(cos).max() <= 1 + 1e-6
    ranked = content_ranking(emb, hist, cand, k=6)
    np.testing.assert_array_equal(cand[np.argsort(-cos, axis=1, kind="stable")], ranked)
    # By hand for the first user: one item, so its query is that item's unit vector.
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    item = hist.items[0]
    np.testing.assert_allclose(cos[0], unit[cand] @ unit[item], rtol=1e-5)


@pytest.mark.parametrize(
    "override, message",
    [
        ("eval.cold_content_weight=-1", "eval.cold_content_weight=-1.0: must be finite and >= 0"),
        ("eval.cold_content_weight=nan", "eval.cold_content_weight=nan"),
        ("eval.cold_content_temperature=0", "eval.cold_content_temperature=0.0: must be finite"),
        ("eval.cold_content_recent=0", "eval.cold_content_recent=0, eval.cold_content_decay=1.0"),
        ("eval.cold_content_decay=0", "eval.cold_content_decay=0.0: the content profile needs"),
        ("eval.cold_content_decay=1.5", "eval.cold_content_decay=1.5: the content profile needs"),
        ("eval.cold_content_vectors=svd", "eval.cold_content_vectors='svd': must be one of embed"),
    ],
)
def test_bad_content_prior_settings_name_the_key(override, message):
    with pytest.raises(ArgumentError, match=message):
        config_lib.validate(config_lib.apply_overrides(config_lib.load_preset("tiny"), [override]))


def _keys(cfg, tmp_path):
    return {s.name: s.key_parts for s in build_stages(cfg, RunLayout(tmp_path), progress=False)}


def test_the_prior_enters_the_cold_start_keys_alone(tmp_path):
    cfg = config_lib.load_preset("tiny")
    off = _keys(cfg, tmp_path)

    def with_eval(**kw):
        return _keys(dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, **kw)), tmp_path)

    cold = [n for n in off if n.startswith("eval_cold")]
    for changed in (
        with_eval(cold_content_weight=2.0),
        with_eval(cold_content_temperature=0.3),
        with_eval(cold_content_vectors="tfidf"),
    ):
        assert cold and all(changed[n] != off[n] for n in cold)
        assert all(changed[n] == off[n] for n in off if not n.startswith("eval_cold"))


def test_the_note_names_tfidf_content_vectors():
    from experiments.evaluation import report

    res = {
        "cold_start_fraction": 0.02,
        "methods": {"content": {}},
        "scoring": {},
        "content_vectors": "tfidf",
    }
    assert "TF-IDF rows" in report.scoring_note([res])
    assert report.scoring_note([{**res, "content_vectors": "embeddings"}]) == ""


def test_tfidf_vectors_of_texts_without_a_kept_word_are_one_line_naming_the_data(tmp_path):
    from types import SimpleNamespace

    from data.errors import ArtifactError
    from experiments.evaluation.retrieval import _content_inputs

    cfg = config_lib.apply_overrides(
        config_lib.load_preset("tiny"), ["eval.cold_content_vectors=tfidf"]
    )
    ds = SimpleNamespace(catalog=SimpleNamespace(texts=["", "the", "a"]))
    with pytest.raises(ArtifactError, match=r"prepared: no item text has a word TF-IDF keeps"):
        _content_inputs(cfg, RunLayout(tmp_path), ds, None)

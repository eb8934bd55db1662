"""eval-cold-start: missing artifacts and bad fractions are one-line errors; the results JSON."""

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from data import atomic
from data.prepared import load_prepared
from experiments import cli, config

TRAIN_FAST = [
    *("--set", "seqmodel.num_layers=1", "--set", "seqmodel.d_model=16"),
    *("--set", "seqmodel.num_heads=2", "--set", "seqmodel.mlp_dim=32"),
    *("--set", "seqmodel.batch_size=16", "--set", "seqmodel.max_steps=6"),
    *("--set", "seqmodel.eval_every=3", "--set", "seqmodel.eval_users=20"),
]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A prepared tiny dataset with random unique SIDs in place of a trained tokenizer."""
    w = tmp_path_factory.mktemp("eval")
    assert cli.main(["prepare", "--workdir", str(w), "--config", "tiny"]) == 0
    V = config.load_json(w / "config.json").rqvae.codebook_size
    asins = [str(a) for a in load_prepared(w / "prepared").catalog.asins]
    rng = np.random.default_rng(0)
    flat = rng.choice(V**3, size=len(asins), replace=False)
    sids = np.stack([(flat // V**i) % V for i in (2, 1, 0)] + [np.zeros(len(asins), int)], 1)
    atomic.save_npy(w / "tokenizer" / "sids.npy", sids.astype(np.int32))
    atomic.write_text(w / "tokenizer" / "asins.txt", "\n".join(asins) + "\n")
    return w


def test_missing_retriever_names_artifact_and_command(workdir, capsys):
    assert cli.main(["eval-cold-start", "--workdir", str(workdir), "--cold-start", "0.02"]) == 1
    err = capsys.readouterr().err
    assert "retriever_cold_0.02" in err and "genret train-retriever" in err
    assert len(err.strip().splitlines()) == 1


def test_missing_prepared_dataset_names_prepare(tmp_path, capsys):
    argv = ["eval-cold-start", "--workdir", str(tmp_path), "--cold-start", "0.02"]
    assert cli.main([*argv, "--config", "tiny"]) == 1
    assert "genret prepare" in capsys.readouterr().err


@pytest.mark.parametrize("fraction", ["0", "0.6", "-0.1"])
def test_fraction_outside_range(tmp_path, capsys, fraction):
    assert cli.main(["eval-cold-start", "--workdir", str(tmp_path), "--cold-start", fraction]) == 1
    assert "(0, 0.5]" in capsys.readouterr().err


@pytest.mark.slow
def test_eval_cold_start_end_to_end(workdir, capsys):
    w = str(workdir)
    train = ["train-retriever", "--workdir", w, "--cold-start", "0.05", "--no-progress"]
    assert cli.main([*train, *TRAIN_FAST]) == 0
    assert cli.main(["eval-cold-start", "--workdir", w, "--cold-start", "0.05"]) == 0
    res = json.loads((workdir / "results" / "cold_start_0.05.json").read_text())
    assert res["cold_start_fraction"] == 0.05 and res["beam_size"] == 20
    assert set(res["methods"]) == {"unconstrained", "random", "content", "static"}
    for m in res["methods"].values():
        for key in ("recall@1", "recall@5", "recall@10", "ndcg@10", "valid_rate"):
            assert 0.0 <= m[key] <= 1.0, key
        assert m["latency_ms_median"] >= 0.0
        assert m["recall@1"] <= m["recall@5"] <= m["recall@10"]
    static, rand = res["methods"]["static"], res["methods"]["random"]
    # STATIC returns only real cold-start items: every returned beam is one.
    assert static["valid_rate"] == 1.0 and static["cold_rate"] == 1.0
    assert rand["expected_recall@1"] == pytest.approx(1 / res["num_cold_items"])
    assert res["static_overhead_ratio_median"] > 0


@pytest.mark.slow
def test_cold_start_scoring_reports_plain_static_beside(workdir, capsys):
    w = str(workdir)
    if not (workdir / "retriever_cold_0.05" / "train_summary.json").exists():
        train = ["train-retriever", "--workdir", w, "--cold-start", "0.05", "--no-progress"]
        assert cli.main([*train, *TRAIN_FAST]) == 0
    argv = ["eval-cold-start", "--workdir", w, "--cold-start", "0.05"]
    path = workdir / "results" / "cold_start_0.05.json"
    plain_set = ["--set", "eval.cold_prior_weight=0", "--set", "eval.cold_level_weights="]
    try:
        assert cli.main([*argv, *plain_set]) == 0
        plain = json.loads(path.read_text())
        assert "static_plain" not in plain["methods"]
        scored_set = ["--set", "eval.cold_prior_weight=0.5"]
        scored_set += ["--set", "eval.cold_level_weights=1,1,0.25,0.25"]
        assert cli.main([*argv, *scored_set]) == 0
        scored = json.loads(path.read_text())
        assert scored["scoring"] == {"prior_weight": 0.5, "level_weights": [1, 1, 0.25, 0.25]}
        # Plain STATIC in the scored run is the plain run's STATIC, beam for beam.
        for key in ("recall@1", "recall@5", "recall@10", "ndcg@10", "cold_rate"):
            assert scored["methods"]["static_plain"][key] == plain["methods"]["static"][key]
        assert scored["methods"]["static"]["cold_rate"] == 1.0
        bad = ["--set", "eval.cold_prior_weight=0.5", "--set", "eval.cold_level_weights=1,1"]
        capsys.readouterr()
        assert cli.main([*argv, *bad]) == 1
        err = capsys.readouterr().err
        assert "eval.cold_level_weights" in err and "2 weights for 4 SID levels" in err
    finally:  # later tests in this module expect the plain scores
        assert cli.main([*argv, *plain_set]) == 0


@pytest.mark.slow
def test_validation_protocol_end_to_end(workdir, capsys):
    w = str(workdir)
    train = ["train-retriever", "--workdir", w, "--split", "cold-val", "--cold-start", "0.05"]
    assert cli.main([*train, "--no-progress", *TRAIN_FAST]) == 0
    assert (workdir / "retriever_coldval_0.05" / "train_summary.json").exists()
    argv = ["eval-cold-start", "--workdir", w, "--cold-start", "0.05", "--validation"]
    capsys.readouterr()
    assert cli.main([*argv, "--no-progress"]) == 0
    assert "cold 0.05:" not in capsys.readouterr().err  # no progress bar
    res = json.loads((workdir / "results" / "validation_cold_start_0.05.json").read_text())
    assert res["split"] == "validation"
    assert res["methods"]["static"]["cold_rate"] == 1.0


@pytest.mark.slow
def test_diagnose_agrees_with_the_validation_evaluation(workdir):
    w = str(workdir)
    rdir = workdir / "retriever_coldval_0.05"
    if not (rdir / "train_summary.json").exists():
        train = ["train-retriever", "--workdir", w, "--split", "cold-val", "--cold-start", "0.05"]
        assert cli.main([*train, "--no-progress", *TRAIN_FAST]) == 0
    val = ["eval-cold-start", "--workdir", w, "--cold-start", "0.05", "--validation"]
    assert cli.main(val) == 0
    static = json.loads((workdir / "results" / "validation_cold_start_0.05.json").read_text())
    static = static["methods"]["static"]
    argv = ["diagnose", "--workdir", w, "--cold-start", "0.05", "--prior-weights", "0,1"]
    # The same retriever twice: averaging identical log-probs must change nothing.
    assert cli.main([*argv, "--retriever", str(rdir), "--retriever", str(rdir)]) == 0
    out = json.loads((workdir / "results" / "validation_diagnose_0.05.json").read_text())
    single = out["retrievers"][str(rdir)]
    for key in ("recall@1", "recall@5", "recall@10"):
        assert single[key] == pytest.approx(static[key]), key
        assert out["ensemble"][key] == pytest.approx(single[key]), key
        assert out["prior_corrected"]["0.0"][key] == pytest.approx(single[key]), key
    # Its prior correction is the evaluation's (eval.cold_prior_weight), beam for beam.
    try:
        assert cli.main([*val, "--set", "eval.cold_prior_weight=1"]) == 0
        path = workdir / "results" / "validation_cold_start_0.05.json"
        corrected = json.loads(path.read_text())["methods"]["static"]
        for key in ("recall@1", "recall@5", "recall@10"):
            assert out["prior_corrected"]["1.0"][key] == pytest.approx(corrected[key]), key
    finally:
        assert cli.main([*val, "--set", "eval.cold_prior_weight=0"]) == 0
    levels = out["levels"]
    assert [r["level"] for r in levels] == [0, 1, 2, 3]
    assert levels[0]["users_reaching"] == out["num_users"]
    for a, b in zip(levels, levels[1:], strict=False):
        assert b["users_reaching"] == round(a["users_reaching"] * a["accuracy_given_prefix"])
    assert all(1.0 <= r["mean_allowed_codes"] <= out["num_cold_items"] for r in levels)


@pytest.mark.slow
def test_content_prior_is_reported_and_a_strong_one_follows_the_content_neighbour(workdir):
    from data.splits import cold_start_split
    from decoding import StaticConstraint, StaticIndex
    from experiments.evaluation.baselines import (
        content_queries,
        content_ranking,
        cosines,
    )
    from experiments.evaluation.profile import ContentProfile
    from experiments.evaluation.retrieval import (
        _content_inputs,
        cold_scoring,
        content_prior_method,
        evaluated_inputs,
        load_inputs,
    )
    from experiments.pipeline.artifacts import load_retriever
    from experiments.pipeline.layout import RunLayout, Split

    w = str(workdir)
    if not (workdir / "retriever_cold_0.05" / "train_summary.json").exists():
        train = ["train-retriever", "--workdir", w, "--cold-start", "0.05", "--no-progress"]
        assert cli.main([*train, *TRAIN_FAST]) == 0
    argv = ["eval-cold-start", "--workdir", w, "--cold-start", "0.05"]
    on = ["--set", "eval.cold_content_weight=4", "--set", "eval.cold_content_temperature=0.1"]
    off = ["--set", "eval.cold_content_weight=0"]
    try:
        assert cli.main([*argv, *on]) == 0
        res = json.loads((workdir / "results" / "cold_start_0.05.json").read_text())
        m = res["methods"]["static_content"]
        assert m["cold_rate"] == 1.0 and m["valid_rate"] == 1.0
        assert (
            res["scoring"]["content_weight"] == 4 and res["scoring"]["content_temperature"] == 0.1
        )
    finally:  # later tests in this module expect no content prior
        assert cli.main([*argv, *off]) == 0
    assert (
        "static_content"
        not in json.loads((workdir / "results" / "cold_start_0.05.json").read_text())["methods"]
    )

    # A prior far stronger than the model: the first beam is the content neighbour's first item
    # for every user whose best cosine is unique.
    layout = RunLayout(workdir)
    cfg = config.load_json(layout.config)
    cfg = config.apply_overrides(cfg, ["eval.cold_content_weight=1000"])
    cfg = config.apply_overrides(cfg, ["eval.cold_content_temperature=0.001"])
    ds, sids = load_inputs(cfg, layout)
    split = cold_start_split(ds, 0.05)
    model = load_retriever(layout, Split("cold", 0.05))
    V = model.space.codebook_size
    _, inputs = evaluated_inputs(
        model, sids, split, cfg.eval, layout.retriever(Split("cold", 0.05))
    )
    static = StaticConstraint(StaticIndex.build(sids[split.cold_items], vocab_size=V))
    # With the tokenizer's embeddings and with sparse TF-IDF rows (eval.cold_content_vectors),
    # and with a decayed profile over 20 items (eval.cold_content_recent, _decay).
    for vectors, recent, decay in (("embeddings", 3, 1.0), ("tfidf", 3, 1.0), ("tfidf", 20, 0.5)):
        cfg = config.apply_overrides(
            cfg,
            [
                f"eval.cold_content_vectors={vectors}",
                f"eval.cold_content_recent={recent}",
                f"eval.cold_content_decay={decay}",
            ],
        )
        profile = ContentProfile(recent, decay)
        emb, histories = _content_inputs(cfg, layout, ds, split)
        assert sp.issparse(emb) == (vectors == "tfidf")
        fn, rows = content_prior_method(
            cfg,
            split,
            model,
            sids[split.cold_items],
            static,
            cold_scoring(cfg.eval, split.train, sids, V),
            emb,
            histories,
        )
        np.testing.assert_array_equal(rows, np.arange(len(histories)))
        res = fn(inputs[:32], rows[:32])
        first = np.asarray(res.tokens)[:, 0]
        unit, queries = content_queries(emb, histories, profile)
        cos = cosines(queries[:32], unit[split.cold_items].T)
        want = content_ranking(emb, histories, split.cold_items, k=1, profile=profile)[:32, 0]
        top2 = np.sort(cos, axis=1)[:, -2:]
        unique = top2[:, 1] - top2[:, 0] > 1e-4
        assert unique.sum() >= 10, vectors
        np.testing.assert_array_equal(first[unique], sids[want[unique]])

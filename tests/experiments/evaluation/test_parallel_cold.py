"""The parallel-codes retriever over the cold set (eval.cold_parallel): what it trains on, its
results beside STATIC's against a brute-force ranking, the validation split, its one-line
errors."""

import json

import numpy as np
import pytest

from data.errors import ArgumentError
from data.prepared import load_prepared
from data.splits import cold_start_split, validation_split
from experiments import cli
from experiments import config as config_lib
from experiments.evaluation import metrics
from experiments.pipeline import stages
from experiments.pipeline.artifacts import load_parallel_cold
from experiments.pipeline.layout import RunLayout, Split
from seqmodel import sasrec
from tests.experiments.commands.test_parallel import FAST
from tests.experiments.evaluation.test_cold_start import TRAIN_FAST, workdir  # noqa: F401

FLAG = ["--set", "eval.cold_parallel=true"]


class _HandedError(Exception):
    """Raised by the spy in place of training: the trainer's arguments were recorded."""


def _prefix_of(short: np.ndarray, long: np.ndarray) -> bool:
    return len(short) <= len(long) and np.array_equal(short, long[: len(short)])


@pytest.mark.parametrize("kind", ["cold", "cold-val"])
def test_it_trains_on_no_cold_item_and_nothing_from_a_test_target_on(
    workdir,  # noqa: F811
    monkeypatch,
    kind,
):
    handed = {}

    def spy(cfg, run_dir, train, valid_histories, valid_targets, num_items, **kw):
        handed.update(train=train, valid_h=valid_histories, valid_t=valid_targets, n=num_items)
        raise _HandedError

    monkeypatch.setattr(sasrec, "train_and_evaluate", spy)
    cfg = config_lib.apply_overrides(config_lib.load_preset("tiny"), [s for s in FAST if "=" in s])
    with pytest.raises(_HandedError):
        stages.train_parallel_cold(cfg, RunLayout(workdir), Split(kind, 0.05), progress=False)
    ds = load_prepared(workdir / "prepared")
    real = cold_start_split(ds, 0.05)
    splits = [real] + ([validation_split(ds, 0.05)] if kind == "cold-val" else [])
    cold = np.logical_or.reduce([s.cold_mask for s in splits])
    train, valid_h = handed["train"], handed["valid_h"]
    assert handed["n"] == len(ds.catalog.asins) and len(train) == len(ds.histories)
    assert len(handed["valid_t"]) > 0 and cold.sum() > 0
    for items in (train.items, valid_h.items, handed["valid_t"]):
        assert not cold[items].any(), "a cold item is a training input or target"
    # A test user's training history is a prefix of their warm items before their target (of
    # the real split, and of the validation split for cold-val).
    for i, s in enumerate(splits):
        assert len(s.test_users) > 0
        for row, user in enumerate(s.test_users):
            before = s.test_histories[row]
            assert _prefix_of(train[int(user)], before[~cold[before]]), (i, int(user))


def _brute_force_parallel(w, split_kind: str, fraction: float, K: int) -> dict:
    """Recall of the top K cold items by the full-catalog scores (ParallelCodes.scores) of the
    trained model, restricted to the cold columns afterwards, for every test user."""
    import jax.numpy as jnp
    from flax import nnx

    layout = RunLayout(w)
    cfg = config_lib.load_json(w / "config.json")
    graphdef, variables = load_parallel_cold(cfg, layout, Split(split_kind, fraction))
    model = nnx.merge(graphdef, variables)
    ds = load_prepared(w / "prepared")
    split = (validation_split if split_kind == "cold-val" else cold_start_split)(ds, fraction)
    items = sasrec.encode_items(split.test_histories, cfg.parallel.max_history)
    scores = np.asarray(model.scores(model.hidden(jnp.asarray(items))[:, -1]))
    cold_scores = scores[:, split.cold_items]
    pred = split.cold_items[np.argsort(-cold_scores, axis=1, kind="stable")[:, :K]]
    return metrics.ranking_metrics(pred, split.test_targets, ks=(1, 5, 10), ndcg_ks=(5, 10))


def _train(w: str, *extra: str) -> None:
    argv = ["train-retriever", "--workdir", w, "--cold-start", "0.05", "--no-progress", *extra]
    assert cli.main(argv) == 0


def test_eval_cold_start_reports_parallel_beside_static(workdir, capsys):  # noqa: F811
    w = str(workdir)
    if not (workdir / "retriever_cold_0.05" / "train_summary.json").exists():
        _train(w, *TRAIN_FAST)
    argv = ["eval-cold-start", "--workdir", w, "--cold-start", "0.05", "--no-progress", *FLAG]
    capsys.readouterr()
    assert cli.main([*argv, *FAST]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "parallel_cold_0.05" in err[0], err
    assert "--cold-start 0.05 --parallel" in err[0], err
    _train(w, "--parallel", *FAST)
    assert (workdir / "parallel_cold_0.05" / "pq_codes.npy").exists()
    path = workdir / "results" / "cold_start_0.05.json"
    assert cli.main([*argv, *FAST, "--set", "eval.cold_hybrid_weight=2"]) == 0
    res = json.loads(path.read_text())
    assert {"static", "hybrid", "parallel", "parallel_content"} <= set(res["methods"])
    assert res["parallel_retriever"] == "parallel_cold_0.05"
    for name in ("parallel", "parallel_content"):
        m = res["methods"][name]
        assert m["cold_rate"] == 1.0 and m["latency_ms_median"] >= 0, name
        assert 0 <= m["recall@1"] <= m["recall@5"] <= m["recall@10"] <= 1, name
    brute = _brute_force_parallel(workdir, "cold", 0.05, res["beam_size"])
    for k in ("recall@1", "recall@5", "recall@10", "ndcg@10"):
        assert res["methods"]["parallel"][k] == pytest.approx(brute[k]), k
    # Other `parallel` settings than it was trained with: one line naming the command.
    capsys.readouterr()
    assert cli.main([*argv, *FAST, "--set", "parallel.temperature=0.05"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "retrain it" in err[0] and "--parallel" in err[0], err
    # Without the flag: no parallel method and no run recorded.
    assert cli.main([*argv[:-1], "eval.cold_parallel=false"]) == 0
    res = json.loads(path.read_text())
    assert "parallel" not in res["methods"] and "parallel_retriever" not in res


def test_validation_writes_parallel_into_the_validation_results(workdir):  # noqa: F811
    w = str(workdir)
    _train(w, "--split", "cold-val", *TRAIN_FAST)
    _train(w, "--split", "cold-val", "--parallel", *FAST)
    assert (workdir / "parallel_coldval_0.05" / "train_summary.json").exists()
    argv = ["eval-cold-start", "--workdir", w, "--cold-start", "0.05", "--validation"]
    assert cli.main([*argv, "--no-progress", *FLAG, *FAST]) == 0
    res = json.loads((workdir / "results" / "validation_cold_start_0.05.json").read_text())
    assert res["split"] == "validation" and res["parallel_retriever"] == "parallel_coldval_0.05"
    m = res["methods"]["parallel"]
    assert {"recall@1", "recall@5", "recall@10"} <= set(m) and m["cold_rate"] == 1.0
    brute = _brute_force_parallel(workdir, "cold-val", 0.05, res["beam_size"])
    assert m["recall@10"] == pytest.approx(brute["recall@10"])


def test_cold_parallel_needs_the_cold_start_evaluation():
    cfg = config_lib.apply_overrides(
        config_lib.load_preset("tiny"), ["eval.cold_parallel=true", "eval.cold=false"]
    )
    with pytest.raises(ArgumentError, match=r"^eval.cold_parallel: needs eval.cold"):
        config_lib.validate(cfg)

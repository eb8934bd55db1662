"""The content nearest-neighbour baseline against a brute-force cosine on a fixture."""

import numpy as np
import pytest

from data.types import Histories
from experiments import baselines


def _brute_force(emb, history, candidates, k, recent=3):
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    query = unit[history[-recent:]].mean(0)
    scored = sorted(candidates, key=lambda c: (-float(unit[c] @ query), c))
    return scored[:k]


def test_content_ranking_equals_brute_force_cosine():
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(40, 6))
    emb[7] = emb[3] * 2.0  # same direction as item 3: a tie broken by the lower index
    lists = [rng.choice(40, rng.integers(1, 7), replace=False) for _ in range(25)]
    candidates = np.array([3, 7, 11, 20, 21, 22, 30, 39])
    got = baselines.content_ranking(emb, Histories.from_lists(lists), candidates, k=5, chunk=4)
    for row, history in zip(got, lists, strict=True):
        assert row.tolist() == _brute_force(emb, history, candidates, 5)


def test_content_ranking_pads_when_fewer_candidates_than_k():
    emb = np.eye(4)
    got = baselines.content_ranking(emb, Histories.from_lists([[0, 1]]), np.array([1, 2]), k=4)
    assert got.tolist() == [[1, 2, -1, -1]]


def test_content_metrics_hand_computed():
    emb = np.eye(3)  # item i is only similar to itself
    h = Histories.from_lists([[0], [1], [2, 2]])
    m = baselines.content_metrics(emb, h, np.array([0, 2, 1]), np.array([0, 1, 2]), k=2)
    # User 0 ranks item 0 first (hit@1); user 1 ranks 1 then 0 (target 2 missed);
    # user 2 ranks 2 then 0 (target 1 missed).
    assert m["recall@1"] == pytest.approx(1 / 3) and m["recall@5"] == pytest.approx(1 / 3)
    assert m["ndcg@5"] == pytest.approx(1 / 3) and m["cold_rate"] == 1.0


@pytest.mark.slow
def test_eval_baselines_needs_no_retriever(tmp_path, capsys):
    import json

    from experiments import cli

    w = str(tmp_path / "w")
    assert cli.main(["prepare", "--config", "tiny", "--workdir", w]) == 0
    assert cli.main(["eval-baselines", "--workdir", w, "--cold-start", "0.05"]) == 0
    res = json.loads((tmp_path / "w" / "results" / "baselines_cold_start_0.05.json").read_text())
    assert set(res["methods"]) == {"random", "content"} and res["split"] == "test"
    content = res["methods"]["content"]
    assert content["cold_rate"] == 1.0 and content["recall@1"] <= content["recall@10"]
    assert "| content |" in capsys.readouterr().out

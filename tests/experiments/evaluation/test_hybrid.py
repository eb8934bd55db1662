"""The LIGER-style hybrid: weighted reciprocal rank fusion against a brute-force computation, its
config checks, and the method in eval-cold-start's results."""

import json

import numpy as np
import pytest

from data.errors import ArgumentError
from experiments import cli
from experiments import config as config_lib
from experiments.evaluation.baselines import rank_fusion
from tests.experiments.evaluation.test_cold_start import TRAIN_FAST, workdir  # noqa: F401


def _brute(rankings, weights, offset, k):
    out = []
    for u in range(len(rankings[0])):
        score = {}
        for r, w in zip(rankings, weights, strict=True):
            for rank, item in enumerate(r[u]):
                if item >= 0:
                    score[int(item)] = score.get(int(item), 0.0) + w / (offset + rank)
        ranked = sorted(score, key=lambda i: (-score[i], i))[:k]
        out.append(ranked + [-1] * (k - len(ranked)))
    return np.array(out)


def _ranking(rng, U, K, N, pad):
    """U rows of K distinct items < N, each row's last `pad` entries -1."""
    rows = np.stack([rng.permutation(N)[:K] for _ in range(U)])
    if pad:
        rows[:, K - pad :] = -1
    return rows


@pytest.mark.parametrize("seed", range(6))
def test_rank_fusion_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    N = int(rng.integers(3, 30))
    K1, K2 = int(rng.integers(1, min(N, 8) + 1)), int(rng.integers(1, min(N, 8) + 1))
    a = _ranking(rng, 7, K1, N, int(rng.integers(0, K1)))
    b = _ranking(rng, 7, K2, N, int(rng.integers(0, K2)))
    weights = [1.0, float(rng.choice([0.5, 1.0, 2.0, 4.0]))]
    offset = float(rng.choice([1.0, 5.0, 60.0]))
    k = int(rng.integers(1, 12))
    got = rank_fusion([a, b], weights, offset=offset, k=k)
    np.testing.assert_array_equal(got, _brute([a, b], weights, offset, k))


def test_rank_fusion_weight_zero_keeps_the_first_ranking_and_ties_go_to_the_lower_item():
    a = np.array([[4, 2, 9]])
    b = np.array([[1, 4, 7]])
    np.testing.assert_array_equal(rank_fusion([a, b], [1.0, 0.0], offset=1, k=3), a)
    # Equal weights and offset: 4 gets 1 + 1/2; 1 and 2 tie at 1 and 1/2... 1 (rank 0 in b) = 1.
    np.testing.assert_array_equal(rank_fusion([a, b], [1.0, 1.0], offset=1, k=3), [[4, 1, 2]])


@pytest.mark.parametrize(
    "override, message",
    [
        ("eval.cold_hybrid_weight=-1", "eval.cold_hybrid_weight=-1.0: must be finite and >= 0"),
        ("eval.cold_hybrid_weight=inf", "eval.cold_hybrid_weight=inf"),
        ("eval.cold_hybrid_offset=0", "eval.cold_hybrid_offset=0.0: must be finite and > 0"),
    ],
)
def test_bad_hybrid_settings_name_the_key(override, message):
    with pytest.raises(ArgumentError, match=message):
        config_lib.validate(config_lib.apply_overrides(config_lib.load_preset("tiny"), [override]))


def test_hybrid_is_reported_beside_static_and_content(workdir):  # noqa: F811
    w = str(workdir)
    if not (workdir / "retriever_cold_0.05" / "train_summary.json").exists():
        train = ["train-retriever", "--workdir", w, "--cold-start", "0.05", "--no-progress"]
        assert cli.main([*train, *TRAIN_FAST]) == 0
    argv = ["eval-cold-start", "--workdir", w, "--cold-start", "0.05", "--no-progress"]
    path = workdir / "results" / "cold_start_0.05.json"
    try:
        # A content weight far above STATIC's: the fused ranking's first item is the content
        # neighbour's wherever the two differ.
        on = ["--set", "eval.cold_hybrid_weight=1000", "--set", "eval.cold_hybrid_offset=1"]
        assert cli.main([*argv, *on]) == 0
        res = json.loads(path.read_text())
        m = res["methods"]
        assert m["hybrid"]["recall@1"] == pytest.approx(m["content"]["recall@1"])
        assert m["hybrid"]["cold_rate"] == 1.0
        assert res["scoring"]["hybrid_weight"] == 1000
        # Weight ~0: STATIC's order, with content only filling what STATIC leaves empty.
        tiny = ["--set", "eval.cold_hybrid_weight=1e-9", "--set", "eval.cold_hybrid_offset=1"]
        assert cli.main([*argv, *tiny]) == 0
        m = json.loads(path.read_text())["methods"]
        assert m["hybrid"]["recall@1"] == pytest.approx(m["static"]["recall@1"])
    finally:  # later tests in the shared module fixture expect no hybrid
        assert cli.main([*argv, "--set", "eval.cold_hybrid_weight=0"]) == 0
    assert "hybrid" not in json.loads(path.read_text())["methods"]

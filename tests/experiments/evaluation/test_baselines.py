"""The content nearest-neighbour baseline against a brute-force cosine on a fixture; the item
co-occurrence baseline against brute-force counting."""

import numpy as np
import pytest
import scipy.sparse as sp

from data.types import Histories
from experiments.evaluation import baselines, metrics


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


def _cooc_brute_force(train_lists, last, n, k, window):
    counts = np.zeros(n)
    for seq in train_lists:
        for i, a in enumerate(seq):
            for j, b in enumerate(seq):
                if 0 < abs(i - j) <= window and a == last and b != last:
                    counts[b] += 1
    pop = np.bincount(np.concatenate([np.asarray(s, int) for s in train_lists]), minlength=n)
    return sorted(range(n), key=lambda j: (-counts[j], -pop[j], j))[:k]


@pytest.mark.parametrize("window", [1, 2])
def test_cooccurrence_ranking_equals_brute_force(window):
    rng = np.random.default_rng(1)
    n = 15
    train = [list(rng.choice(n, rng.integers(1, 7), replace=False)) for _ in range(30)]
    users = [list(rng.choice(n, rng.integers(1, 4), replace=False)) for _ in range(20)]
    got = baselines.cooccurrence_ranking(
        Histories.from_lists(train), Histories.from_lists(users), n, k=8, window=window
    )
    for row, history in zip(got, users, strict=True):
        assert row.tolist() == _cooc_brute_force(train, history[-1], n, 8, window)
    # Fewer items than k: padded with -1.
    small = baselines.cooccurrence_ranking(
        Histories.from_lists([[0, 1]]), Histories.from_lists([[0]]), 2, k=4
    )
    assert small.tolist() == [[1, 0, -1, -1]]


def test_cooccurrence_metrics_read_no_held_out_item():
    # Training = each history without its last two items: the pair (2, 3) is never counted, so
    # user 1 (last item 2, target 3) is ranked by popularity and misses at rank 1.
    all_h = Histories.from_lists([[0, 1, 0, 1, 2, 3], [1, 0, 2, 3, 4]])
    m, _ = baselines.cooccurrence_metrics(
        all_h, Histories.from_lists([[0], [2]]), np.array([1, 3]), 5
    )
    assert m["recall@1"] == pytest.approx(0.5)  # user 0: 1 follows 0 in training


def test_cooccurrence_metrics_plain_and_unseen_from_one_ranking():
    # Both lists against their own rankings: the plain top 10, and a ranking as deep as the
    # catalog with the history items dropped afterwards (the brute-force "unseen top 10").
    rng = np.random.default_rng(3)
    n = 40
    all_h = Histories.from_lists(
        [list(rng.choice(n, rng.integers(4, 12), replace=False)) for _ in range(60)]
    )
    lists = [list(rng.choice(n, rng.integers(1, 15), replace=False)) for _ in range(25)]
    users = Histories.from_lists(lists)
    targets = rng.integers(0, n, 25)
    plain, unseen = baselines.cooccurrence_metrics(all_h, users, targets, n)
    train = baselines.loo_training(all_h, n)
    want_plain = baselines.cooccurrence_ranking(train, users, n, k=10)
    full = baselines.cooccurrence_ranking(train, users, n, k=n)
    want_unseen = [
        [i for i in row if i not in h][:10] for row, h in zip(full.tolist(), lists, strict=True)
    ]
    want_unseen = np.array([r + [-1] * (10 - len(r)) for r in want_unseen])
    for got, want in ((plain, want_plain), (unseen, want_unseen)):
        ref = metrics.ranking_metrics(want, targets, ks=(1, 5, 10), ndcg_ks=(5, 10))
        assert {k: got[k] for k in ref} == pytest.approx(ref)
    assert unseen["recall@10"] != plain["recall@10"]  # the fixture makes the two lists differ


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


def test_sparse_tfidf_rows_rank_as_their_dense_copy_and_brute_force():
    """eval.cold_content_vectors=tfidf hands the content neighbour sparse rows: the same ranking
    and the same queries as the dense array, and the brute-force cosine's order."""
    import scipy.sparse as sp

    rng = np.random.default_rng(1)
    dense = rng.random((40, 30)) * (rng.random((40, 30)) < 0.2)  # mostly zeros, like TF-IDF
    dense[5] = 0.0  # an item with no kept word: a zero row, cosine 0 to everything
    dense[9] = dense[4] * 2.0  # same direction as item 4: a tie broken by the lower index
    lists = [rng.choice(40, rng.integers(1, 7), replace=False) for _ in range(25)]
    candidates = np.array([4, 5, 9, 11, 20, 21, 22, 30, 39])
    h = Histories.from_lists(lists)
    got = baselines.content_ranking(sp.csr_matrix(dense), h, candidates, k=6, chunk=4)
    np.testing.assert_array_equal(got, baselines.content_ranking(dense, h, candidates, k=6))
    norm = np.linalg.norm(dense, axis=1)
    for row, history in zip(got, lists, strict=True):
        query = np.mean([dense[i] / norm[i] if norm[i] else dense[i] for i in history[-3:]], 0)
        cos = {c: float(dense[c] @ query) / norm[c] if norm[c] else 0.0 for c in candidates}
        assert row.tolist() == sorted(candidates, key=lambda c: (-cos[c], c))[:6]
    unit_s, query_s = baselines.content_queries(sp.csr_matrix(dense), h)
    unit_d, query_d = baselines.content_queries(dense, h)
    assert sp.issparse(unit_s) and sp.issparse(query_s)
    np.testing.assert_allclose(unit_s.toarray(), unit_d, atol=1e-12)
    np.testing.assert_allclose(query_s.toarray(), query_d, atol=1e-12)


@pytest.mark.parametrize("sparse", [False, True])
def test_content_profile_weights_the_recent_items_by_decay_as_brute_force(sparse):
    """The query is sum_j decay**j unit(item j places from the end) / sum_j decay**j over the
    last `recent` items (fewer when the history is shorter); decay 1 gives the plain mean."""
    rng = np.random.default_rng(2)
    dense = rng.random((30, 12)) * (rng.random((30, 12)) < 0.5)
    dense[3] = 0.0
    lists = [rng.choice(30, rng.integers(1, 9), replace=False) for _ in range(20)]
    h = Histories.from_lists(lists)
    emb = sp.csr_matrix(dense) if sparse else dense
    norm = np.maximum(np.linalg.norm(dense, axis=1), 1e-12)
    for recent, decay in ((3, 1.0), (5, 0.5), (20, 0.85), (1, 0.3)):
        profile = baselines.ContentProfile(recent, decay)
        _, query = baselines.content_queries(emb, h, profile)
        query = query.toarray() if sparse else query
        for row, history in zip(query, lists, strict=True):
            last = history[-recent:][::-1]  # most recent first
            w = decay ** np.arange(len(last))
            want = (w[:, None] * (dense[last] / norm[last, None])).sum(0) / w.sum()
            np.testing.assert_allclose(row, want, atol=1e-12)
    plain = baselines.content_queries(emb, h)[1]
    same = baselines.content_queries(emb, h, baselines.ContentProfile(3, 1.0))[1]
    if sparse:
        plain, same = plain.toarray(), same.toarray()
    np.testing.assert_array_equal(plain, same)


@pytest.mark.parametrize("recent, decay", [(0, 1.0), (3, 0.0), (3, 1.5), (3, -0.2)])
def test_content_profile_rejects_bad_settings(recent, decay):
    with pytest.raises(ValueError, match="content profile"):
        baselines.ContentProfile(recent, decay)

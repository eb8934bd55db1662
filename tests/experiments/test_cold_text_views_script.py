"""docs/scripts/cold_text_views.py: the content neighbour under other text views on a cold split.
Its row for the preset's view must be the harness's content neighbour on the same split; the best
item cosine and the learned term weights against brute force."""

import importlib.util

import numpy as np
import pytest
import scipy.sparse as sp

from data.types import Histories
from experiments.evaluation.baselines import content_queries
from experiments.evaluation.profile import ContentProfile
from tests.experiments.helpers import ROOT, cold_val_neighbour, prepare_tiny, run_docs_script

_spec = importlib.util.spec_from_file_location(
    "cold_text_views", ROOT / "docs" / "scripts" / "cold_text_views.py"
)
views = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(views)


def run_script(*args: str):
    return run_docs_script("cold_text_views.py", *args)


@pytest.mark.slow
def test_preset_row_is_the_harness_neighbour(tmp_path):
    w = prepare_tiny(tmp_path / "w")
    out = run_script(str(w), "0.1")
    assert out.returncode == 0, out.stderr
    rows = {
        cells[0]: cells[1:]
        for line in out.stdout.splitlines()
        if line.startswith("| ") and not line.startswith("| view")
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }
    assert set(rows) >= {
        "the preset's TF-IDF",
        "the preset's TF-IDF, best item",
        "the preset's TF-IDF, learned term weights",
        "word 1-grams",
        "co-occurrence -> text",
    }
    for name, cells in rows.items():
        for cell in cells:
            if cell:
                r1, r10 = (float(x) for x in cell.split(" / "))
                assert 0 <= r1 <= r10 <= 100, (name, cell)
    assert rows["the preset's TF-IDF"][0] == cold_val_neighbour(w, 0.1)


def test_bad_input_is_one_line(tmp_path):
    out = run_script(str(tmp_path / "missing"), "0.02")
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        f"cold_text_views: {tmp_path / 'missing' / 'config.json'} is missing; make it with "
        f"`genret prepare --workdir {tmp_path / 'missing'}`"
    ]
    out = run_script(str(tmp_path), "0.9")
    assert out.returncode == 1 and "FRACTION: expected a fraction in (0, 0.5]" in out.stderr


def test_best_item_cosine_is_the_best_weighted_cosine():
    rng = np.random.default_rng(0)
    dense = rng.random((12, 30)) * (rng.random((12, 30)) < 0.3)
    dense[:, 0] = 0.1  # no empty row
    rows = sp.csr_matrix(dense)
    seqs = [rng.choice(9, size=n, replace=False) for n in (1, 3, 6)]
    profile = ContentProfile(recent=4, decay=0.7)
    cands = np.array([9, 10, 11])
    histories = Histories.from_lists(seqs)
    got = views.best_item_cosine(
        content_queries(rows, histories, profile)[0], histories, profile, cands
    )
    unit = dense / np.linalg.norm(dense, axis=1, keepdims=True)
    for u, h in enumerate(seqs):
        kept = h[-4:]
        for j, c in enumerate(cands):
            want = max(0.7 ** (len(kept) - 1 - k) * unit[i] @ unit[c] for k, i in enumerate(kept))
            assert got[u, j] == pytest.approx(want)


def test_term_weight_gradient_matches_finite_differences():
    rng = np.random.default_rng(1)
    V, items, B = 7, 5, 4
    Q = sp.csr_matrix(rng.random((B, V)) * (rng.random((B, V)) < 0.6))
    XT = sp.csr_matrix(rng.random((V, items)))
    targets = np.array([0, 2, 4, 1])
    own = (np.array([0, 3]), np.array([1, 4]))
    params = rng.normal(size=V + 1) * 0.3
    _, grad = views.term_weight_loss(params, Q, XT, targets, own, 0.1)
    for i in range(V + 1):
        step = np.zeros(V + 1)
        step[i] = 1e-6
        up, _ = views.term_weight_loss(params + step, Q, XT, targets, own, 0.1)
        down, _ = views.term_weight_loss(params - step, Q, XT, targets, own, 0.1)
        assert grad[i] == pytest.approx((up - down) / 2e-6, rel=1e-4, abs=1e-7)


def test_learned_term_weights_lower_their_loss_and_start_at_one():
    rng = np.random.default_rng(2)
    dense = rng.random((40, 25)) * (rng.random((40, 25)) < 0.3)
    dense[:, 0] = 0.05
    rows = sp.csr_matrix(dense)
    seqs = [rng.choice(40, size=6, replace=False) for _ in range(60)]
    # Times run on across users, so that the newest tenth is a few items, not every user's last.
    train = Histories.from_lists(seqs, [np.arange(6) + 6 * u for u in range(60)])
    profile = ContentProfile(recent=3, decay=0.85)
    w0, losses0 = views.learned_term_weights(rows, train, profile, epochs=0)
    assert np.array_equal(w0, np.ones(25)) and len(losses0) == 1
    w, losses = views.learned_term_weights(rows, train, profile, epochs=3, lr=0.05, batch=32)
    assert len(losses) == 4 and losses[-1] < losses[0]
    assert not np.allclose(w, 1.0)

"""seqmodel.sasrec_teacher: SASRec's next items at every position against a brute-force softmax,
its soft targets and their join with the co-occurrence teacher's against loops over levels,
the config's checks, training with it (keyed by it), and the pipeline training SASRec first."""

import dataclasses
import json

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from data.errors import ArtifactError
from data.types import Histories
from experiments import cli
from seqmodel import sasrec
from seqmodel.config import SeqModelConfig, identity_fields, keyed_fields
from seqmodel.cooc_teacher import CoocTeacher, join_targets
from seqmodel.sasrec_teacher import NextItemTopK, SasrecTeacher, check_histories, next_item_topk
from seqmodel.tokens import TokenizeExample, sid_tokens
from seqmodel.train import train_and_evaluate
from tests.seqmodel.test_train import CFG, _data, _logged

SIDS = np.array([[0, 0, 0], [0, 1, 0], [0, 1, 1], [1, 0, 0], [0, 0, 1]])


def _softmax(x):
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_next_items_are_the_top_of_the_softmax_at_every_position():
    num_items, T, k = 9, 4, 3
    cfg = SeqModelConfig(num_layers=1, d_model=8, num_heads=2, mlp_dim=16, max_history=T)
    model = sasrec.SASRec(cfg, num_items, rngs=nnx.Rngs(0))
    graphdef, variables = nnx.split(model)
    # One history longer than T, one of length T, short ones, one single item; batches of 2.
    h = Histories.from_lists([[0, 1, 2, 3, 4, 5, 6], [8, 7, 6, 5], [3, 1], [2], [4, 0, 8]])
    top = next_item_topk(graphdef, variables, h, max_history=T, k=k, key="m", batch_size=2)
    assert top.offsets.tolist() == [0, 6, 9, 10, 10, 12] and top.key == "m"
    probs = _softmax(model(jnp.asarray(sasrec.encode_items(h, T))))  # [U, T, N], full window
    for u in range(len(h)):
        n = len(h[u])
        for t in range(1, n):
            row = top.offsets[u] + t - 1
            column = T - n + t - 1  # the state after item t - 1 within the last T items
            if column < T - min(n, T):  # before the window: no state, no weight
                assert not top.probs[row].any()
                continue
            expected = np.argsort(-probs[u, column], kind="stable")[:k]
            assert top.items[row].tolist() == expected.tolist()
            np.testing.assert_allclose(top.probs[row], probs[u, column, expected], rtol=1e-5)
    # The longest history (7 items, window 3..6): its states predict positions 4, 5, 6 only.
    assert not top.probs[:3].any() and top.probs[3:6].all()
    check_histories(top, h, "t")
    with pytest.raises(ArtifactError, match="other histories"):
        check_histories(top, Histories.from_lists([[0, 1]] * 5), "t")


def test_saved_tables_load_only_under_their_key(tmp_path):
    top = NextItemTopK(np.array([0, 2]), np.array([[1, 2], [3, 0]]), np.ones((2, 2)) / 2, "a:1")
    top.save(tmp_path / "t.npz")
    back = NextItemTopK.load(tmp_path / "t.npz", "a:1")
    assert back.key == "a:1" and back.items.tolist() == top.items.tolist()
    assert NextItemTopK.load(tmp_path / "t.npz", "a:2") is None
    assert NextItemTopK.load(tmp_path / "missing.npz", "a:1") is None
    (tmp_path / "bad.npz").write_bytes(b"not a table")
    assert NextItemTopK.load(tmp_path / "bad.npz", "a:1") is None


def _brute_targets(sids, top, user, n, items, length):
    L, K = sids.shape[1], top.items.shape[1]
    codes, weights = np.zeros((length, K), int), np.zeros((length, K))
    m = len(items)
    for j in range(1, m):
        row_base = length - (m - 1) * L + (j - 1) * L
        r = top.offsets[user] + (n - m + j) - 1
        for level in range(L):
            for c in range(K):
                item, p = top.items[r, c], top.probs[r, c]
                codes[row_base + level, c] = sids[item, level]
                same = (sids[item, :level] == sids[items[j], :level]).all()
                weights[row_base + level, c] = p if same else 0.0
    return codes, weights


def test_soft_targets_against_loops_over_levels():
    rng = np.random.default_rng(0)
    h = Histories.from_lists([[0, 1, 2, 3, 4], [2, 3], [4, 0, 1]])
    rows = int(np.maximum(h.lengths() - 1, 0).sum())
    top = NextItemTopK(
        np.array([0, 4, 5, 7]),
        rng.integers(0, 5, (rows, 4)).astype(np.int32),
        rng.random((rows, 4)).astype(np.float32),
        "k",
    )
    teacher = SasrecTeacher(SIDS, top)
    length = 5 * 3
    for user, kept in ((0, [2, 3, 4]), (0, [0, 1, 2, 3, 4]), (1, [2, 3]), (2, [4, 0, 1]), (2, [1])):
        n = len(h[user])
        codes, weights = teacher.targets(user, n, np.array(kept), length)
        want_codes, want_weights = _brute_targets(SIDS, top, user, n, kept, length)
        np.testing.assert_allclose(weights, want_weights, rtol=1e-6)
        np.testing.assert_array_equal(codes[weights > 0], want_codes[weights > 0])
    # By hand: user 2's item 0 after item 4 (row 5). Level 0 keeps every item, level 1 those
    # whose first code is item 0's (0).
    codes, weights = teacher.targets(2, 3, np.array([4, 0, 1]), 9)
    np.testing.assert_allclose(weights[3], top.probs[5], rtol=1e-6)
    keep = SIDS[top.items[5], 0] == 0
    np.testing.assert_allclose(weights[4], top.probs[5] * keep, rtol=1e-6)
    assert codes[4].tolist() == SIDS[top.items[5], 1].tolist()


def test_join_scales_the_second_teacher_to_the_first_ones_total():
    codes = np.array([[1, 2], [3, 4], [5, 6]])
    weights = np.array([[2.0, 1.0], [0.0, 0.0], [4.0, 0.0]], np.float32)
    extra = np.array([[7, 8], [9, 9], [1, 1]])
    extra_w = np.array([[0.3, 0.1], [0.2, 0.2], [0.0, 0.0]], np.float32)
    c, w = join_targets(codes, weights, extra, extra_w)
    assert c.tolist() == [[1, 2, 7, 8], [3, 4, 9, 9], [5, 6, 1, 1]]
    np.testing.assert_allclose(w, [[2, 1, 2.25, 0.75], [0, 0, 0.2, 0.2], [4, 0, 0, 0]], rtol=1e-6)
    # Each teacher is half of a row where both have weight.
    np.testing.assert_allclose(w[0, 2:].sum(), w[0, :2].sum())
    # At ratio 2 the second is twice the first's total; rows where the first has none keep theirs.
    _, w2 = join_targets(codes, weights, extra, extra_w, 2.0)
    np.testing.assert_allclose(w2, [[2, 1, 4.5, 1.5], [0, 0, 0.2, 0.2], [4, 0, 0, 0]], rtol=1e-6)


def test_a_row_holds_both_teachers_targets():
    h = Histories.from_lists([[0, 1, 2, 3, 4], [3, 0, 4]])
    rng = np.random.default_rng(1)
    top = NextItemTopK(
        np.array([0, 4, 6]),
        rng.integers(0, 5, (6, 2)).astype(np.int32),
        rng.random((6, 2)).astype(np.float32),
        "k",
    )
    cooc = CoocTeacher.build(h, SIDS, k=3)
    second = SasrecTeacher(SIDS, top)
    tokens = sid_tokens(SIDS, 2)
    plain = TokenizeExample(tokens, 3, "causal", cooc)
    both = TokenizeExample(tokens, 3, "causal", cooc, next_items=second)
    record = {"user": np.int32(0), "items": h[0], "times": np.zeros(5, np.int64)}
    a, b = plain.map(record), both.map(record)
    np.testing.assert_array_equal(a["targets"], b["targets"])
    length = len(a["targets"])
    kept = h[0][-3:]
    more = second.targets(0, 5, kept, length)
    want = join_targets(a["teach_codes"], a["teach_weights"], *more)
    np.testing.assert_array_equal(b["teach_codes"], want[0])
    np.testing.assert_allclose(b["teach_weights"], want[1])
    assert b["teach_codes"].shape[1] == 3 + 2
    # The teacher's weight is the join's ratio.
    heavy = TokenizeExample(tokens, 3, "causal", cooc, next_items=SasrecTeacher(SIDS, top, 3.0))
    want3 = join_targets(a["teach_codes"], a["teach_weights"], *more, 3.0)
    np.testing.assert_allclose(heavy.map(record)["teach_weights"], want3[1])
    assert not np.allclose(want3[1], want[1])
    with pytest.raises(ValueError, match="give both"):
        TokenizeExample(tokens, 3, "causal", None, next_items=second)


def test_off_by_default_validated_and_out_of_the_keys_when_off():
    assert SeqModelConfig().sasrec_teacher == 0
    # The keys of earlier retrievers, SASRec runs and draft heads hold.
    assert "sasrec_teacher" not in identity_fields(CFG)
    assert "sasrec_teacher" not in keyed_fields(CFG) and "self_distill" in keyed_fields(CFG)
    on = dataclasses.replace(CFG, cooc_distill=0.5, sasrec_teacher=8)
    assert identity_fields(on)["sasrec_teacher"] == 8
    with pytest.raises(ValueError, match="only with seqmodel.cooc_distill"):
        dataclasses.replace(CFG, sasrec_teacher=8)
    with pytest.raises(ValueError, match="sasrec_teacher must be >= 0"):
        dataclasses.replace(CFG, cooc_distill=0.5, sasrec_teacher=-1)
    with pytest.raises(ValueError, match="layout causal or bucketed"):
        dataclasses.replace(on, layout="sliding")
    with pytest.raises(ValueError, match="not with shuffle_ties"):
        dataclasses.replace(on, shuffle_ties=True)
    # Its weight is keyed only where it acts, and refused unless finite and positive.
    assert "sasrec_teacher_weight" not in identity_fields(on)
    assert "sasrec_teacher_weight" not in identity_fields(
        dataclasses.replace(CFG, sasrec_teacher_weight=2.0)
    )
    assert (
        identity_fields(dataclasses.replace(on, sasrec_teacher_weight=2.0))["sasrec_teacher_weight"]
        == 2.0
    )
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="sasrec_teacher_weight must be a finite number"):
            dataclasses.replace(on, sasrec_teacher_weight=bad)


def test_training_with_it_differs_and_is_keyed_by_its_table(tmp_path):
    data = _data()
    rows = int(np.maximum(data.train.lengths() - 1, 0).sum())
    rng = np.random.default_rng(0)
    offsets = np.concatenate([[0], np.cumsum(np.maximum(data.train.lengths() - 1, 0))])
    items = rng.integers(0, len(data.sids), (rows, 4)).astype(np.int32)
    probs = rng.random((rows, 4)).astype(np.float32)
    cooc = dataclasses.replace(CFG, cooc_distill=0.5)
    cfg = dataclasses.replace(cooc, sasrec_teacher=4)
    with pytest.raises(ValueError, match="needs a next-item table"):
        train_and_evaluate(cfg, tmp_path / "x", data, show_progress=False)
    top = NextItemTopK(offsets, items, probs, "one")
    train_and_evaluate(cfg, tmp_path / "a", data, show_progress=False, next_items=top)
    train_and_evaluate(cooc, tmp_path / "b", data, show_progress=False)
    assert _logged(tmp_path / "a") != _logged(tmp_path / "b")
    info = json.loads((tmp_path / "a" / "retriever.json").read_text())
    assert info["teacher"] == "|sasrec:one"
    other = NextItemTopK(offsets, items, probs, "two")
    train_and_evaluate(cfg, tmp_path / "c", data, show_progress=False, next_items=other)
    assert json.loads((tmp_path / "c" / "retriever.json").read_text())["inputs"] != info["inputs"]
    short = NextItemTopK(offsets[:-1], items, probs, "one")
    with pytest.raises(ArtifactError, match="other histories"):
        train_and_evaluate(cfg, tmp_path / "d", data, show_progress=False, next_items=short)


def test_pipeline_trains_sasrec_then_the_retriever_from_it(tmp_path, capsys):
    w = str(tmp_path)
    argv = ["pipeline", "--dataset", "synthetic", "--workdir", w, "--config", "tiny"]
    argv += ["--set", "seqmodel.num_epochs=1", "--set", "eval.cold=false", "--no-progress"]
    argv += ["--set", "seqmodel.cooc_distill=0.5", "--set", "seqmodel.sasrec_teacher=5"]
    argv += ["--set", "sasrec.num_epochs=1"]
    assert cli.main(argv) == 0
    ledger = json.loads((tmp_path / "stages.json").read_text())
    assert set(ledger) == {"tokenizer", "sasrec_teacher", "retriever_loo", "eval_warm"}
    assert (tmp_path / "sasrec_loo" / "next_items_top5.npz").is_file()
    student = json.loads((tmp_path / "retriever_loo" / "retriever.json").read_text())
    sas_run = json.loads((tmp_path / "sasrec_loo" / "retriever.json").read_text())
    assert student["teacher"].startswith(f"|sasrec:{sas_run['inputs']}:")
    assert student["seqmodel"]["sasrec_teacher"] == 5
    # Another SASRec config: the retriever's stage runs again, under the new SASRec's key.
    assert cli.main(argv + ["--set", "sasrec.d_model=32"]) == 0
    again = json.loads((tmp_path / "retriever_loo" / "retriever.json").read_text())
    assert again["teacher"] != student["teacher"]
    # The cold-start splits have no SASRec: one line saying so.
    bad = ["train-retriever", "--workdir", w, "--config", "tiny", "--split", "cold"]
    bad += ["--cold-start", "0.1", "--no-progress"]
    bad += ["--set", "seqmodel.cooc_distill=0.5", "--set", "seqmodel.sasrec_teacher=5"]
    capsys.readouterr()
    assert cli.main(bad) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "seqmodel.sasrec_teacher=5: leave-one-out only" in err[0]
    bad = ["train-retriever", "--workdir", w, "--config", "tiny", "--split", "loo"]
    bad += ["--set", "seqmodel.cooc_distill=0.5", "--set", "seqmodel.sasrec_teacher=100000"]
    assert cli.main(bad + ["--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "more next items than the" in err[0]

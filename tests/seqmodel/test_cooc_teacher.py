"""seqmodel.cooc_distill: the co-occurrence teacher's targets by hand, the mixed loss, and training
with it (resumes exactly, differs from the plain loss, off by default and out of fingerprints)."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from data.types import Histories
from seqmodel.config import SeqModelConfig, identity_fields
from seqmodel.cooc_teacher import CoocTeacher
from seqmodel.tokens import TokenizeExample, sid_tokens
from seqmodel.train import teacher_mix, train_and_evaluate
from tests.seqmodel.test_train import CFG, _data, _logged, assert_resumes_exactly

SIDS = np.array([[0, 0, 0], [0, 1, 0], [0, 1, 1], [1, 0, 0], [0, 0, 1]])
# Adjacent pairs: (0, 1), (1, 2), (0, 2), (3, 0), (0, 4), (1, 2) again.
TRAIN = Histories.from_lists([[0, 1, 2], [0, 2], [3, 0, 4], [1, 2]])


def test_teacher_targets_by_hand():
    teacher = CoocTeacher.build(TRAIN, SIDS, k=3)
    # Item 0's neighbours 1, 2, 3, 4 once each: the top three by the lower index.
    assert teacher.counts[0].tolist() == [1, 1, 1]
    np.testing.assert_array_equal(teacher.neighbour_codes[0], SIDS[[1, 2, 3]])
    # Item 1: 2 twice, 0 once, and an empty slot.
    assert teacher.counts[1].tolist() == [2, 1, 0]
    codes, weights = teacher.targets(np.array([0, 1, 2]), length=4 * 3)
    assert not weights[:6].any()  # padding and the first item: no previous item
    # Item 1 after item 0: level 0 sees all three neighbours; level 1 those whose level-0 code
    # is 0 (items 1, 2); level 2 those that start (0, 1) (items 1, 2).
    assert codes[6].tolist() == [0, 0, 1] and weights[6].tolist() == [1, 1, 1]
    assert codes[7, :2].tolist() == [1, 1] and weights[7].tolist() == [1, 1, 0]
    assert codes[8, :2].tolist() == [0, 1] and weights[8].tolist() == [1, 1, 0]
    # Item 2 after item 1 (neighbours 2 x2, 0 x1): level 2 keeps item 2 alone.
    assert codes[9, :2].tolist() == [0, 0] and weights[9].tolist() == [2, 1, 0]
    assert codes[10, :2].tolist() == [1, 0] and weights[10].tolist() == [2, 1, 0]
    assert codes[11, 0] == 1 and weights[11].tolist() == [2, 0, 0]
    with pytest.raises(ValueError, match="k must be >= 1"):
        CoocTeacher.build(TRAIN, SIDS, k=0)


def test_rows_carry_the_teacher_aligned_with_their_targets():
    teacher = CoocTeacher.build(TRAIN, SIDS, k=3)
    tf = TokenizeExample(sid_tokens(SIDS, 2), 4, "causal", teacher)
    row = tf.map({"items": np.array([3, 0, 1, 2], np.int32)})
    assert row["teach_codes"].shape == row["teach_weights"].shape == (12, 3)
    # Wherever the teacher has weight, the loss has a target, and every teacher code is a code.
    assert (row["weights"][row["teach_weights"].sum(-1) > 0] == 1).all()
    assert row["teach_codes"].max() < 2
    # A history longer than max_history: the teacher sees the kept items only.
    longer = tf.map({"items": np.array([4, 3, 0, 1, 2], np.int32)})
    np.testing.assert_array_equal(longer["teach_weights"], row["teach_weights"])
    with pytest.raises(ValueError, match="not packed"):
        TokenizeExample(sid_tokens(SIDS, 2), 4, "packed", teacher)


def test_mix_is_the_plain_loss_where_the_teacher_agrees_or_is_absent():
    rng = np.random.default_rng(0)
    logits = jnp.asarray(rng.normal(size=(2, 3, 5)), jnp.float32)
    targets = np.array([[1, 4, 0], [2, 2, 3]])
    ll = jnp.take_along_axis(jax_log_softmax(logits), jnp.asarray(targets)[..., None], -1)[..., 0]
    cfg = dataclasses.replace(CFG, cooc_distill=0.4)
    codes = np.zeros((2, 3, 2), np.int32)
    codes[..., 0] = targets  # the teacher names the target only
    weights = np.zeros((2, 3, 2), np.float32)
    weights[0, :, 0] = 3.0
    out = teacher_mix(ll, logits, jnp.asarray(codes), jnp.asarray(weights), cfg)
    np.testing.assert_allclose(out, ll, rtol=1e-6)  # row 0 agrees, row 1 has no teacher
    # A teacher split over two codes: (1 - a) ll + a (weighted mean of their log-probs).
    codes[0, 0] = [1, 3]
    weights[0, 0] = [1.0, 3.0]
    out = teacher_mix(ll, logits, jnp.asarray(codes), jnp.asarray(weights), cfg)
    lp = np.asarray(jax_log_softmax(logits))[0, 0]
    want = 0.6 * float(ll[0, 0]) + 0.4 * (lp[1] + 3 * lp[3]) / 4
    np.testing.assert_allclose(out[0, 0], want, rtol=1e-5)


def jax_log_softmax(x):
    return x - jnp.log(jnp.exp(x).sum(-1, keepdims=True))


def test_off_by_default_and_in_the_fingerprint():
    assert SeqModelConfig().cooc_distill == 0.0
    assert identity_fields(CFG)["cooc_distill"] == 0.0
    on = identity_fields(dataclasses.replace(CFG, cooc_distill=0.5))
    assert on["cooc_distill"] == 0.5 and on["cooc_neighbors"] == 32
    with pytest.raises(ValueError, match="not layout=packed"):
        dataclasses.replace(CFG, layout="packed", cooc_distill=0.5)
    with pytest.raises(ValueError, match=r"cooc_distill must be in \[0, 1\]"):
        dataclasses.replace(CFG, cooc_distill=1.5)


@pytest.mark.parametrize("layout", ["causal", "bucketed"])
def test_training_with_the_teacher_resumes_exactly(tmp_path, layout):
    cfg = dataclasses.replace(CFG, layout=layout, cooc_distill=0.5, cooc_neighbors=4)
    data = _data(cfg=cfg)
    logged = assert_resumes_exactly(cfg, tmp_path, data).logged
    plain = dataclasses.replace(cfg, cooc_distill=0.0)
    train_and_evaluate(plain, tmp_path / "c", data, show_progress=False)
    assert _logged(tmp_path / "c") != logged


def test_the_teacher_enters_the_retrievers_keys_alone(tmp_path):
    from experiments import config as config_lib
    from experiments.pipeline.layout import RunLayout
    from experiments.pipeline.workflow import build_stages

    cfg = config_lib.load_preset("tiny")
    cfg = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, sasrec=True))

    def keys(**kw):
        c = dataclasses.replace(cfg, seqmodel=dataclasses.replace(cfg.seqmodel, **kw))
        return {s.name: s.key_parts for s in build_stages(c, RunLayout(tmp_path), progress=False)}

    off = keys()
    on = keys(cooc_distill=0.5)
    changed = {n for n in off if on[n] != off[n]}
    assert changed and all(n.startswith(("retriever", "eval")) for n in changed)
    assert on["sasrec"] == off["sasrec"] and on["tokenizer"] == off["tokenizer"]

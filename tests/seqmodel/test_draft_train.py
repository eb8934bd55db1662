"""Training the draft head: 2 steps on a frozen retriever then restore; resume; joint training."""

import dataclasses
import json

import jax
import numpy as np
import pytest
from flax import nnx

from seqmodel.config import DraftConfig
from seqmodel.draft_train import load_draft, train_draft
from seqmodel.inference import load_retriever
from seqmodel.state import init_model
from seqmodel.tokens import TokenSpace
from seqmodel.train import train_and_evaluate
from tests.seqmodel.test_train import CFG, LEVELS, V, _data

# One validation, at step 2: the best checkpoint is the last state.
DRAFT = DraftConfig(batch_size=8, max_steps=2, eval_every=2, warmup_steps=1)


def _backbone():
    return init_model(CFG, TokenSpace(num_levels=LEVELS, codebook_size=V))


def _leaves(tree):
    return jax.tree.leaves(jax.device_get(tree))


@pytest.mark.slow
def test_two_steps_then_restore_the_best_head(tmp_path):
    cfg = dataclasses.replace(CFG, draft=DRAFT)
    backbone = _backbone()
    frozen = _leaves(nnx.state(backbone, nnx.Param))
    result = train_draft(cfg, tmp_path, backbone, _data(), retriever_key="r0", show_progress=False)
    assert result.summary["steps"] == 2
    # The retriever is frozen: training the head leaves its weights as they were.
    for a, b in zip(frozen, _leaves(nnx.state(backbone, nnx.Param)), strict=True):
        np.testing.assert_array_equal(a, b)
    head, info = load_draft(tmp_path, backbone)
    assert info["retriever"] == "r0" and info["seqmodel"]["draft"]["max_steps"] == 2
    assert result.summary["best_step"] == 2
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2]
    assert all(np.isfinite(r["loss"]) for r in rows if "loss" in r)
    restored, trained = _leaves(nnx.state(head, nnx.Param)), _leaves(result.state.params)
    for a, b in zip(restored, trained, strict=True):
        np.testing.assert_array_equal(a, b)
    # Rerunning resumes at the end: nothing more to train.
    again = train_draft(cfg, tmp_path, backbone, _data(), retriever_key="r0", show_progress=False)
    assert again.summary["steps"] == 2
    # Other retriever weights: the head starts over.
    other = train_draft(
        cfg, tmp_path, backbone, _data(), retriever_key="r1", show_progress=False, stop_after=1
    )
    assert other.summary["steps"] == 1


@pytest.mark.slow
def test_head_restore_refuses_another_retriever(tmp_path):
    cfg = dataclasses.replace(CFG, draft=dataclasses.replace(DRAFT, max_steps=1))
    train_draft(cfg, tmp_path, _backbone(), _data(), retriever_key="r0", show_progress=False)
    wider = init_model(
        dataclasses.replace(CFG, d_model=32), TokenSpace(num_levels=LEVELS, codebook_size=V)
    )
    with pytest.raises(ValueError, match="another retriever"):
        load_draft(tmp_path, wider)


@pytest.mark.slow
def test_joint_training_two_steps_and_load(tmp_path):
    cfg = dataclasses.replace(CFG, draft_head="joint", max_steps=2, eval_every=2)
    result = train_and_evaluate(cfg, tmp_path, _data(), show_progress=False)
    assert result.summary["steps"] == 2
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    draft = [r["draft_nll"] for r in rows if "draft_nll" in r]
    assert len(draft) == 2 and all(0 < x < 2 * np.log(V) for x in draft)
    model = load_retriever(tmp_path)
    assert hasattr(model, "draft") and model.draft.cfg == cfg.draft


def test_a_plain_retrievers_fingerprint_ignores_head_settings():
    from seqmodel.train import inputs_fingerprint

    data = _data()
    plain = inputs_fingerprint(CFG, data)
    assert (
        inputs_fingerprint(dataclasses.replace(CFG, draft=DraftConfig(cell="gru")), data) == plain
    )
    assert inputs_fingerprint(dataclasses.replace(CFG, draft_head="joint"), data) != plain

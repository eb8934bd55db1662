"""seqmodel.self_distill: the mixed loss against brute force, the train step's teacher wiring, and
training from a teacher (resumes exactly, needs its teacher, keyed by it; the pipeline trains the
teacher first)."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from experiments import cli
from seqmodel.config import SeqModelConfig, identity_fields
from seqmodel.state import init_model, new_train_state
from seqmodel.tokens import TokenSpace, sid_tokens
from seqmodel.train import teacher_soft_mix, train_and_evaluate, train_step, training_batches
from tests.seqmodel.test_train import CFG, _data, _logged


def _log_softmax(x):
    x = np.asarray(x, np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def test_mix_is_brute_force_cross_entropy_against_the_teacher():
    rng = np.random.default_rng(0)
    logits = jnp.asarray(rng.normal(size=(2, 3, 5)), jnp.float32)
    teacher = jnp.asarray(3 * rng.normal(size=(2, 3, 5)), jnp.float32)
    ll = jnp.asarray(rng.normal(size=(2, 3)), jnp.float32)
    out = np.asarray(teacher_soft_mix(ll, logits, teacher, 0.3))
    p_teacher = np.exp(_log_softmax(teacher))
    soft = (p_teacher * _log_softmax(logits)).sum(-1)
    np.testing.assert_allclose(out, 0.7 * ll + 0.3 * soft, rtol=1e-5, atol=1e-6)
    # At weight 0 the plain term alone; a teacher equal to the student: -(its entropy).
    np.testing.assert_allclose(teacher_soft_mix(ll, logits, teacher, 0.0), ll, rtol=1e-6)
    same = np.asarray(teacher_soft_mix(ll, logits, logits, 1.0))
    p = np.exp(_log_softmax(logits))
    np.testing.assert_allclose(same, (p * np.log(p)).sum(-1), rtol=1e-5)


def test_the_step_distils_the_teachers_logits_on_its_own_inputs():
    """A train step at self_distill=1 (no dropout) reports the batch's mean cross-entropy of
    the student against the teacher's teacher-forced distribution, recomputed here by hand."""
    cfg = dataclasses.replace(CFG, dropout=0.0, self_distill=1.0)
    data = _data(cfg=cfg)
    space = TokenSpace(num_levels=data.sids.shape[1], codebook_size=data.codebook_size)
    batches, _ = training_batches(cfg, data, sid_tokens(data.sids, data.codebook_size))
    batch = {k: jnp.asarray(v) for k, v in next(batches).items()}
    graphdef, tx, state = new_train_state(cfg, space, 4)
    teacher = init_model(dataclasses.replace(cfg, seed=7, self_distill=0.0), space)
    t_graphdef, t_params = nnx.split(teacher)
    student = nnx.merge(graphdef, state.params)
    s_lp = _log_softmax(student.target_logits(batch["inputs"]))
    t_lp = _log_softmax(teacher.target_logits(batch["inputs"]))
    per_token = (np.exp(t_lp) * s_lp).sum(-1)
    w = batch["weights"]
    want = -(per_token * w).sum() / w.sum()
    _, metrics = train_step(
        graphdef, tx, 0, state, batch, teacher_params=t_params, teacher_graphdef=t_graphdef
    )
    np.testing.assert_allclose(float(metrics["loss"]), want, rtol=1e-4)
    # The plain step's loss is the targets' NLL, which differs.
    _, plain = train_step(graphdef, tx, 0, new_train_state(cfg, space, 4)[2], batch)
    assert abs(float(plain["loss"]) - want) > 1e-3


def test_off_by_default_validated_and_out_of_the_keys_when_off():
    assert SeqModelConfig().self_distill == 0.0
    assert "self_distill" not in identity_fields(CFG)  # the keys of earlier retrievers hold
    assert identity_fields(dataclasses.replace(CFG, self_distill=0.5))["self_distill"] == 0.5
    with pytest.raises(ValueError, match=r"self_distill must be in \[0, 1\]"):
        dataclasses.replace(CFG, self_distill=1.5)


def test_training_from_a_teacher_resumes_exactly_and_is_keyed_by_it(tmp_path):
    data = _data()
    train_and_evaluate(CFG, tmp_path / "teacher", data, show_progress=False)
    cfg = dataclasses.replace(CFG, self_distill=0.5)
    with pytest.raises(ValueError, match="needs a teacher"):
        train_and_evaluate(cfg, tmp_path / "x", data, show_progress=False)
    with pytest.raises(ValueError, match="needs a teacher"):
        train_and_evaluate(CFG, tmp_path / "x", data, teacher_dir=tmp_path / "teacher")

    def run(name, **kw):
        return train_and_evaluate(
            cfg, tmp_path / name, data, show_progress=False, teacher_dir=tmp_path / "teacher", **kw
        )

    straight = run("a")
    assert run("b", stop_after=2).summary["steps"] == 2
    resumed = run("b")
    leaves = [jax.tree.leaves(jax.device_get(r.state.params)) for r in (straight, resumed)]
    for x, y in zip(*leaves, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)
    assert _logged(tmp_path / "a") == _logged(tmp_path / "b")
    train_and_evaluate(CFG, tmp_path / "plain", data, show_progress=False)
    assert _logged(tmp_path / "plain") != _logged(tmp_path / "a")
    # The student's fingerprint holds its teacher's: another teacher, another run.
    key = json.loads((tmp_path / "a" / "retriever.json").read_text())["inputs"]
    other = dataclasses.replace(CFG, seed=5)
    train_and_evaluate(other, tmp_path / "teacher2", data, show_progress=False)
    run_other = train_and_evaluate(
        cfg, tmp_path / "c", data, show_progress=False, teacher_dir=tmp_path / "teacher2"
    )
    assert run_other.summary["steps"] == straight.summary["steps"]
    assert json.loads((tmp_path / "c" / "retriever.json").read_text())["inputs"] != key


def test_pipeline_trains_the_teacher_then_its_student(tmp_path):
    w = str(tmp_path)
    argv = ["pipeline", "--dataset", "synthetic", "--workdir", w, "--config", "tiny"]
    argv += ["--set", "seqmodel.num_epochs=1", "--set", "eval.cold=false"]
    argv += ["--set", "seqmodel.self_distill=0.5", "--no-progress"]
    assert cli.main(argv) == 0
    ledger = json.loads((tmp_path / "stages.json").read_text())
    assert set(ledger) == {"tokenizer", "retriever_loo", "eval_warm"}
    teacher = json.loads((tmp_path / "teacher_loo" / "retriever.json").read_text())
    student = json.loads((tmp_path / "retriever_loo" / "retriever.json").read_text())
    assert teacher["seqmodel"]["self_distill"] == 0.0
    assert student["seqmodel"]["self_distill"] == 0.5
    assert student["teacher"] == teacher["inputs"]
    assert (tmp_path / "results" / "warm.json").is_file()
    # Another retriever seed: the student and its teacher train again (the teacher under its
    # new inputs, not kept for its finished summary).
    argv += ["--set", "seqmodel.seed=3"]
    assert cli.main(argv) == 0
    again = json.loads((tmp_path / "teacher_loo" / "retriever.json").read_text())
    assert again["seqmodel"]["seed"] == 3 and again["inputs"] != teacher["inputs"]
    student = json.loads((tmp_path / "retriever_loo" / "retriever.json").read_text())
    assert student["teacher"] == again["inputs"]

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
from seqmodel.train import (
    mean_distribution,
    teacher_soft_mix,
    train_and_evaluate,
    train_step,
    training_batches,
)
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


def test_several_teachers_give_the_mean_of_their_distributions():
    rng = np.random.default_rng(1)
    logits = [jnp.asarray(2 * rng.normal(size=(2, 3, 5)), jnp.float32) for _ in range(3)]
    want = np.mean([np.exp(_log_softmax(x)) for x in logits], axis=0)
    got = np.exp(_log_softmax(mean_distribution(logits)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert mean_distribution(logits[:1]) is logits[0]  # one teacher: its own logits


def test_the_step_distils_the_teachers_logits_on_its_own_inputs():
    """A train step at self_distill=1 (no dropout) reports the batch's mean cross-entropy of
    the student against the teacher's teacher-forced distribution, recomputed here by hand."""
    cfg = dataclasses.replace(CFG, dropout=0.0, self_distill=1.0)
    data = _data(cfg=cfg)
    space = TokenSpace(num_levels=data.sids.shape[1], codebook_size=data.codebook_size)
    batches, _ = training_batches(cfg, data, sid_tokens(data.sids, data.codebook_size))
    batch = {k: jnp.asarray(v) for k, v in next(batches).items()}
    graphdef, tx, state = new_train_state(cfg, space, 4)
    # Output heads scaled up, so that the distributions are far from uniform and each other.
    student = nnx.merge(graphdef, state.params)
    student.head.kernel[...] = 30 * student.head.kernel[...]
    state = dataclasses.replace(state, params=nnx.state(student))
    teacher = init_model(dataclasses.replace(cfg, seed=7, self_distill=0.0), space)
    teacher.head.kernel[...] = 30 * teacher.head.kernel[...]
    t_graphdef, t_params = nnx.split(teacher)
    s_lp = _log_softmax(student.target_logits(batch["inputs"]))
    t_lp = _log_softmax(teacher.target_logits(batch["inputs"]))
    per_token = (np.exp(t_lp) * s_lp).sum(-1)
    w = batch["weights"]
    want = -(per_token * w).sum() / w.sum()
    _, metrics = train_step(
        graphdef, tx, 0, state, batch, teacher_params=(t_params,), teacher_graphdefs=(t_graphdef,)
    )
    np.testing.assert_allclose(float(metrics["loss"]), want, rtol=1e-4)
    # Two teachers: the cross-entropy against the mean of their distributions.
    second = init_model(dataclasses.replace(cfg, seed=8, self_distill=0.0), space)
    second.head.kernel[...] = 30 * second.head.kernel[...]
    g2, p2 = nnx.split(second)
    t2 = np.exp(_log_softmax(second.target_logits(batch["inputs"])))
    mean = (np.exp(t_lp) + t2) / 2
    want2 = -((mean * s_lp).sum(-1) * w).sum() / w.sum()
    _, metrics2 = train_step(
        graphdef,
        tx,
        0,
        state,
        batch,
        teacher_params=(t_params, p2),
        teacher_graphdefs=(t_graphdef, g2),
    )
    np.testing.assert_allclose(float(metrics2["loss"]), want2, rtol=1e-4)
    assert abs(want2 - want) > 1e-2
    # The plain step's loss is the targets' NLL, which differs.
    _, plain = train_step(graphdef, tx, 0, new_train_state(cfg, space, 4)[2], batch)
    assert abs(float(plain["loss"]) - want) > 1e-3


def test_off_by_default_validated_and_out_of_the_keys_when_off():
    assert SeqModelConfig().self_distill == 0.0
    assert SeqModelConfig().distill_teachers == 1
    fields = identity_fields(CFG)  # the keys of earlier retrievers hold
    assert "self_distill" not in fields and "distill_teachers" not in fields
    assert identity_fields(dataclasses.replace(CFG, self_distill=0.5))["self_distill"] == 0.5
    two = dataclasses.replace(CFG, self_distill=0.5, distill_teachers=2)
    assert identity_fields(two)["distill_teachers"] == 2
    with pytest.raises(ValueError, match=r"self_distill must be in \[0, 1\]"):
        dataclasses.replace(CFG, self_distill=1.5)
    # Without distillation the count changes nothing, so it keys nothing either.
    assert "distill_teachers" not in identity_fields(dataclasses.replace(CFG, distill_teachers=2))
    with pytest.raises(ValueError, match="distill_teachers must be >= 1"):
        dataclasses.replace(CFG, distill_teachers=0)


def test_training_from_a_teacher_resumes_exactly_and_is_keyed_by_it(tmp_path):
    data = _data()
    train_and_evaluate(CFG, tmp_path / "teacher", data, show_progress=False)
    cfg = dataclasses.replace(CFG, self_distill=0.5)
    with pytest.raises(ValueError, match="needs a teacher"):
        train_and_evaluate(cfg, tmp_path / "x", data, show_progress=False)
    with pytest.raises(ValueError, match="needs a teacher"):
        train_and_evaluate(CFG, tmp_path / "x", data, teacher_dirs=[tmp_path / "teacher"])

    def run(name, **kw):
        return train_and_evaluate(
            cfg,
            tmp_path / name,
            data,
            show_progress=False,
            teacher_dirs=[tmp_path / "teacher"],
            **kw,
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
        cfg, tmp_path / "c", data, show_progress=False, teacher_dirs=[tmp_path / "teacher2"]
    )
    assert run_other.summary["steps"] == straight.summary["steps"]
    assert json.loads((tmp_path / "c" / "retriever.json").read_text())["inputs"] != key
    # Two teachers: both keys, in order; the count must match the config's.
    with pytest.raises(ValueError, match="distill_teachers=1, but 2 teacher"):
        train_and_evaluate(
            cfg, tmp_path / "d", data, teacher_dirs=[tmp_path / "teacher", tmp_path / "teacher2"]
        )
    both = dataclasses.replace(cfg, distill_teachers=2)
    train_and_evaluate(
        both,
        tmp_path / "e",
        data,
        show_progress=False,
        teacher_dirs=[tmp_path / "teacher", tmp_path / "teacher2"],
    )
    keys = [
        json.loads((tmp_path / d / "retriever.json").read_text())["inputs"]
        for d in ("teacher", "teacher2")
    ]
    assert json.loads((tmp_path / "e" / "retriever.json").read_text())["teacher"] == "+".join(keys)
    assert _logged(tmp_path / "e") not in (_logged(tmp_path / "a"), _logged(tmp_path / "c"))


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
    # Two teachers: the first is kept (same inputs), the second trains at the next seed.
    mtime = (tmp_path / "teacher_loo" / "train_summary.json").stat().st_mtime_ns
    assert cli.main(argv + ["--set", "seqmodel.distill_teachers=2"]) == 0
    assert (tmp_path / "teacher_loo" / "train_summary.json").stat().st_mtime_ns == mtime
    second = json.loads((tmp_path / "teacher_loo_1" / "retriever.json").read_text())
    assert second["seqmodel"]["seed"] == 4 and second["seqmodel"]["self_distill"] == 0.0
    student = json.loads((tmp_path / "retriever_loo" / "retriever.json").read_text())
    assert student["seqmodel"]["distill_teachers"] == 2
    assert student["teacher"] == again["inputs"] + "+" + second["inputs"]

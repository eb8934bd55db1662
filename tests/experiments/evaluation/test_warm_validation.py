"""genret eval-warm --validation: every user's second-to-last item, never the test targets."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from data.prepared import load_prepared
from data.splits import holdout_rows, leave_one_out
from experiments import cli
from tests.experiments.evaluation.test_cold_start import TRAIN_FAST, workdir  # noqa: F401


def test_validation_scores_second_to_last_items(workdir: Path, capsys):  # noqa: F811
    w = str(workdir)
    assert cli.main(["train-retriever", "--workdir", w, "--split", "loo", *TRAIN_FAST]) == 0
    capsys.readouterr()
    assert cli.main(["eval-warm", "--workdir", w, "--validation", "--no-progress"]) == 0
    assert "leave-one-out:" not in capsys.readouterr().err  # no progress bar
    res = json.loads((workdir / "results" / "validation_warm.json").read_text())
    assert res["split"] == "validation"
    assert not (workdir / "results" / "warm.json").exists()  # the test result is untouched
    split = leave_one_out(load_prepared(workdir / "prepared"))
    assert res["num_test_users"] == len(split.valid_targets)
    assert set(res["methods"]) == {"unconstrained", "static_all_items", "item_cooccurrence"}
    assert 0 <= res["methods"]["static_all_items"]["recall@10"] <= 1
    # The same lists without history items: no target is a history item (one interaction per
    # user and item), so dropping them can only move hits up.
    pairs = enumerate(split.valid_targets)
    assert not any(int(t) in set(split.valid_histories[u]) for u, t in pairs)
    excluded = res["history_excluded"]
    assert set(excluded) == set(res["methods"])
    for name in excluded:
        for k in ("recall@1", "recall@5", "recall@10", "ndcg@5", "ndcg@10"):
            assert excluded[name][k] >= res["methods"][name][k], (name, k)
    # The users outside the retriever's 20-user holdout (seed 0): the split's hits less at most 20.
    outside = res["outside_holdout"]
    assert outside["num_users"] == len(split.valid_targets) - 20
    assert set(outside) == {"num_users", *res["methods"]} - {"item_cooccurrence"}
    for name in ("unconstrained", "static_all_items"):
        for k in ("recall@1", "recall@5", "recall@10"):
            hits_all = res["methods"][name][k] * res["num_test_users"]
            hits_out = outside[name][k] * outside["num_users"]
            assert hits_all - 20 - 1e-6 <= hits_out <= hits_all + 1e-6, (name, k)
    capsys.readouterr()
    assert cli.main(["eval-warm", "--workdir", w, "--validation", "--decoder", "nezha"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--validation" in err[0]


def test_warm_prior_weight_scores_beams_and_reports_plain_beside(workdir: Path, capsys):  # noqa: F811
    w = str(workdir)
    if not (workdir / "retriever_loo" / "train_summary.json").exists():
        assert cli.main(["train-retriever", "--workdir", w, "--split", "loo", *TRAIN_FAST]) == 0
    path = workdir / "results" / "validation_warm.json"
    assert cli.main(["eval-warm", "--workdir", w, "--validation"]) == 0
    plain = json.loads(path.read_text())
    assert "scoring" not in plain and "static_plain" not in plain["methods"]
    scored_set = ["--set", "eval.warm_prior_weight=2", "--set", "eval.warm_prior_levels=3"]
    assert cli.main(["eval-warm", "--workdir", w, "--validation", *scored_set]) == 0
    scored = json.loads(path.read_text())
    assert scored["scoring"] == {"prior_weight": 2.0, "prior_levels": 3}
    # The plain joint log-probability beside: the unscored run's STATIC, metric for metric.
    keys = ("recall@1", "recall@5", "recall@10", "ndcg@5", "ndcg@10")
    ranked = [scored["methods"]["static_plain"][k] for k in keys]
    assert ranked == [plain["methods"]["static_all_items"][k] for k in keys]
    # A strong correction reorders the beams: some metric moves.
    assert [scored["methods"]["static_all_items"][k] for k in keys] != ranked
    capsys.readouterr()
    bad = ["--set", "eval.warm_prior_weight=1", "--set", "eval.warm_prior_levels=9"]
    assert cli.main(["eval-warm", "--workdir", w, "--validation", *bad]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "eval.warm_prior_levels" in err[0]
    assert json.loads(path.read_text()) == scored  # the rejected run wrote nothing


def test_ensemble_averages_retrievers_of_the_same_sids(workdir: Path, tmp_path, capsys):  # noqa: F811
    w = str(workdir)
    loo = workdir / "retriever_loo"
    if not (loo / "train_summary.json").exists():
        assert cli.main(["train-retriever", "--workdir", w, "--split", "loo", *TRAIN_FAST]) == 0
    path = workdir / "results" / "validation_warm.json"
    assert cli.main(["eval-warm", "--workdir", w, "--validation"]) == 0
    alone = json.loads(path.read_text())["methods"]
    # A retriever averaged with itself decodes as it does alone.
    assert cli.main(["eval-warm", "--workdir", w, "--validation", "--ensemble", str(loo)]) == 0
    twice = json.loads(path.read_text())
    assert twice["ensemble"] == [str(loo), str(loo)]
    for name in ("unconstrained", "static_all_items"):
        for k in ("recall@1", "recall@5", "recall@10", "ndcg@5", "ndcg@10"):
            assert twice["methods"][name][k] == alone[name][k], (name, k)
    # Another seed on a copy of the same prepared data and SIDs.
    other = tmp_path / "seed1"
    for part in ("prepared", "tokenizer"):
        shutil.copytree(workdir / part, other / part)
    shutil.copy(workdir / "config.json", other / "config.json")
    train = ["train-retriever", "--workdir", str(other), "--split", "loo", *TRAIN_FAST]
    assert cli.main([*train, "--set", "seqmodel.seed=1"]) == 0
    member = other / "retriever_loo"
    # Validation of the two: outside the union of both seeds' 20-user holdouts.
    assert cli.main(["eval-warm", "--workdir", w, "--validation", "--ensemble", str(member)]) == 0
    n = json.loads(path.read_text())["num_test_users"]
    union = np.union1d(holdout_rows(n, 20, 0), holdout_rows(n, 20, 1))
    assert 20 < len(union) <= 40
    assert json.loads(path.read_text())["outside_holdout"]["num_users"] == n - len(union)
    # Seed 0 alone, scored outside both holdouts: its own ranking, on the users of the union.
    assert cli.main(["eval-warm", "--workdir", w, "--validation", "--holdout-of", str(member)]) == 0
    res = json.loads(path.read_text())
    assert "ensemble" not in res
    for k in ("recall@1", "recall@5", "recall@10", "ndcg@5", "ndcg@10"):
        assert res["methods"]["static_all_items"][k] == alone["static_all_items"][k], k
    assert res["outside_holdout"]["num_users"] == n - len(union)
    assert res["outside_holdout"]["holdout_of"] == [str(member)]
    # A DIR without a retriever, or --holdout-of without --validation: one line, nothing written.
    capsys.readouterr()
    no_retriever = ["eval-warm", "--workdir", w, "--validation", "--holdout-of", str(tmp_path)]
    not_validation = ["eval-warm", "--workdir", w, "--holdout-of", str(member)]
    for args, named in ((no_retriever, str(tmp_path)), (not_validation, "--holdout-of")):
        assert cli.main(args) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and named in err[0], err
    assert json.loads(path.read_text()) == res
    assert cli.main(["eval-warm", "--workdir", w, "--ensemble", str(member)]) == 0
    res = json.loads((workdir / "results" / "warm.json").read_text())
    assert res["ensemble"] == [str(loo), str(member)] and res["split"] == "test"
    assert 0 <= res["methods"]["static_all_items"]["recall@10"] <= 1
    assert res["methods"]["static_all_items"]["item_rate"] == 1.0
    # A retriever of another split (or other SIDs) is refused in one line naming it.
    cold = ["train-retriever", "--workdir", w, "--split", "cold", "--cold-start", "0.05"]
    assert cli.main([*cold, *TRAIN_FAST]) == 0
    capsys.readouterr()
    bad = workdir / "retriever_cold_0.05"
    assert cli.main(["eval-warm", "--workdir", w, "--ensemble", str(bad)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(bad) in err[0] and "other SIDs or another split" in err[0]
    assert json.loads((workdir / "results" / "warm.json").read_text()) == res  # untouched
    assert (
        cli.main(["eval-warm", "--workdir", w, "--ensemble", str(member), "--decoder", "nezha"])
        == 1
    )
    assert "--ensemble" in capsys.readouterr().err


def test_sasrec_validation_ranks_second_to_last_items(workdir: Path, capsys):  # noqa: F811
    w = str(workdir)
    fast = [
        *("--set", "sasrec.num_layers=1", "--set", "sasrec.d_model=16"),
        *("--set", "sasrec.mlp_dim=32", "--set", "sasrec.batch_size=16"),
        *("--set", "sasrec.max_steps=4", "--set", "sasrec.eval_every=2"),
        *("--set", "sasrec.eval_users=20"),
    ]
    assert cli.main(["sasrec", "--workdir", w, "--validation", "--no-progress", *fast]) == 0
    res = json.loads((workdir / "results" / "validation_sasrec.json").read_text())
    assert res["split"] == "validation" and res["train"]["steps"] == 4
    assert not (workdir / "results" / "sasrec.json").exists()  # the test result is untouched
    split = leave_one_out(load_prepared(workdir / "prepared"))
    assert res["num_test_users"] == len(split.valid_targets)
    assert 0 <= res["methods"]["sasrec"]["recall@10"] <= 1
    # The top 10 without history items (never a target here) holds every hit the plain top 10 has.
    for k in ("recall@5", "recall@10", "ndcg@5", "ndcg@10"):
        assert res["history_excluded"]["sasrec"][k] >= res["methods"]["sasrec"][k], k
    # The users outside the early stop's 20: their hits are the whole split's less at most 20.
    outside = res["outside_holdout"]
    assert outside["num_users"] == len(split.valid_targets) - 20
    for k in ("recall@5", "recall@10"):
        hits_all = res["methods"]["sasrec"][k] * res["num_test_users"]
        hits_out = outside["sasrec"][k] * outside["num_users"]
        assert hits_all - 20 - 1e-6 <= hits_out <= hits_all + 1e-6, k
    # The same trained model then ranks the test targets (restored, not retrained).
    assert cli.main(["sasrec", "--workdir", w, "--no-progress", *fast]) == 0
    test = json.loads((workdir / "results" / "sasrec.json").read_text())
    assert test["split"] == "test" and test["train"]["train_seconds_this_run"] == 0.0
    # The whole run's training time survives the second entry into the finished run.
    assert test["train"]["train_seconds"] == res["train"]["train_seconds"] > 0
    del test["train"]["train_seconds_this_run"], res["train"]["train_seconds_this_run"]
    assert test["train"] == res["train"]
    assert test["num_test_users"] == len(split.test_targets)
    assert "outside_holdout" not in test  # a test ranking has no holdout to stand outside


def test_sasrec_validation_can_leave_out_a_retrievers_holdout_too(
    workdir: Path,  # noqa: F811
    tmp_path,
    capsys,
):
    loo = workdir / "retriever_loo"
    if not (loo / "train_summary.json").exists():
        assert (
            cli.main(["train-retriever", "--workdir", str(workdir), "--split", "loo", *TRAIN_FAST])
            == 0
        )
    w = tmp_path / "w"
    for part in ("prepared", "tokenizer"):
        shutil.copytree(workdir / part, w / part)
    shutil.copy(workdir / "config.json", w / "config.json")
    # SASRec's holdout drawn with seed 1, the retriever's (20 users) with seed 0.
    fast = [
        *("--set", "sasrec.num_layers=1", "--set", "sasrec.d_model=16"),
        *("--set", "sasrec.mlp_dim=32", "--set", "sasrec.batch_size=16"),
        *("--set", "sasrec.max_steps=2", "--set", "sasrec.eval_every=2"),
        *("--set", "sasrec.eval_users=20", "--set", "sasrec.seed=1"),
    ]
    args = ["sasrec", "--workdir", str(w), "--validation", "--no-progress", *fast]
    path = w / "results" / "validation_sasrec.json"
    assert cli.main(args) == 0
    alone = json.loads(path.read_text())
    assert cli.main([*args, "--holdout-of", str(loo)]) == 0
    both = json.loads(path.read_text())
    n = alone["num_test_users"]
    union = np.union1d(holdout_rows(n, 20, 1), holdout_rows(n, 20, 0))
    assert 20 < len(union) <= 40
    assert alone["outside_holdout"]["num_users"] == n - 20
    assert both["outside_holdout"]["num_users"] == n - len(union)
    assert both["outside_holdout"]["holdout_of"] == [str(loo)]
    for k in ("recall@5", "recall@10", "ndcg@5", "ndcg@10"):  # every user's ranking unchanged
        assert both["methods"]["sasrec"][k] == alone["methods"]["sasrec"][k], k
    # A DIR without a retriever, or --holdout-of without --validation: one line, nothing written.
    capsys.readouterr()
    no_retriever = [*args, "--holdout-of", str(tmp_path)]
    not_validation = [a for a in args if a != "--validation"] + ["--holdout-of", str(loo)]
    for bad, named in ((no_retriever, str(tmp_path)), (not_validation, "--holdout-of")):
        assert cli.main(bad) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and named in err[0], err
    assert json.loads(path.read_text()) == both
    assert not (w / "results" / "sasrec.json").exists()


def test_holdouts_of_sasrec_harness_runs_are_their_sections_samples(tmp_path: Path):
    """--holdout-of also takes a SASRec (or parallel-codes) run: its holdout is the seeded
    sample of its section's eval_users, as its training drew it; a description without them is
    refused naming the file."""
    from data.errors import ArtifactError
    from experiments.evaluation.retrieval import chosen_on

    runs = {"sasrec": (20, 3), "parallel": (7, 1)}
    for section, (users, seed) in runs.items():
        (tmp_path / section).mkdir()
        info = {section: {"eval_users": users, "seed": seed}, "inputs": "x"}
        (tmp_path / section / "retriever.json").write_text(json.dumps(info))
    got = chosen_on([tmp_path / "sasrec", tmp_path / "parallel"], 50)
    np.testing.assert_array_equal(got[0], holdout_rows(50, 20, 3))
    np.testing.assert_array_equal(got[1], holdout_rows(50, 7, 1))
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "retriever.json").write_text(json.dumps({"sasrec": {"seed": 0}}))
    with pytest.raises(ArtifactError, match="bad/retriever.json: no eval_users and seed"):
        chosen_on([tmp_path / "bad"], 50)

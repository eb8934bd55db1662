"""The cold-start table: the paper's Recall@1 beside test-split results only."""

import dataclasses
import json

import pytest

from experiments import config as config_lib
from experiments.evaluation import report
from experiments.pipeline.layout import RunLayout


def _result(split):
    m = {"recall@1": 0.03, "recall@5": 0.05, "recall@10": 0.1, "ndcg@10": 0.04, "valid_rate": 1.0}
    return {
        "dataset": "beauty",
        "cold_start_fraction": 0.02,
        "num_cold_items": 243,
        "num_test_users": 1548,
        "split": split,
        "methods": {
            "unconstrained": {**m, "recall@1": 0.0},
            "random": {**m, "expected_recall@1": 0.0041},
            "static": m,
        },
    }


def _static_row(table):
    return next(line for line in table.splitlines() if "| static |" in line)


def test_test_split_shows_the_paper_value():
    row = _static_row(report.cold_start_table([_result("test")]))
    assert row.split("|")[3].strip() == "3.00" and row.split("|")[4].strip() == "4.29"


def test_validation_split_leaves_the_paper_column_empty():
    table = report.cold_start_table([_result("validation")])
    assert _static_row(table).split("|")[4].strip() == "–"
    assert "4.29" not in table and "0.42" not in table


def test_plain_static_row_and_scoring_note_when_scored():
    res = _result("test")
    res["methods"]["static_plain"] = {**res["methods"]["static"], "recall@1": 0.02}
    res["scoring"] = {"prior_weight": 0.5, "level_weights": [1.0, 1.0, 0.25, 0.25]}
    table = report.cold_start_table([res])
    plain = next(line for line in table.splitlines() if "| static_plain |" in line)
    assert plain.split("|")[3].strip() == "2.00"
    note = report.scoring_note([res])
    assert "prior weight 0.5" in note and "1, 1, 0.25, 0.25" in note
    assert report.scoring_note([_result("test")]) == ""
    assert "static_plain" not in report.cold_start_table([_result("test")])


def test_content_profile_is_named_in_the_note_only_when_set():
    res = _result("test")
    res["content_profile"] = {"recent": 20, "decay": 0.85}
    note = report.scoring_note([res])
    assert "last 20 items by 0.85**j" in note and "eval.cold_content_decay" in note
    assert "cold_content_decay" not in report.scoring_note([_result("test")])


def test_content_prior_row_and_its_settings_in_the_note():
    res = _result("test")
    res["methods"]["static_plain"] = res["methods"]["static"]
    res["methods"]["static_content"] = {**res["methods"]["static"], "recall@1": 0.061}
    res["scoring"] = {
        "prior_weight": 0.5,
        "level_weights": [1.0, 1.0, 0.25, 0.25],
        "content_weight": 4.0,
        "content_temperature": 0.1,
    }
    row = next(x for x in report.cold_start_table([res]).splitlines() if "| static_content |" in x)
    assert row.split("|")[3].strip() == "6.10"
    note = report.scoring_note([res])
    assert "content prior weight 4 at temperature 0.1" in note and "`static_content` is" in note
    assert "static_content" not in report.scoring_note([_result("test")])
    # The prior alone (no cold-start beam scores, so no plain row): its settings are still named.
    alone = _result("test")
    alone["methods"]["static_content"] = res["methods"]["static_content"]
    alone["scoring"] = {"content_weight": 2.0, "content_temperature": 0.05}
    note = report.scoring_note([alone])
    assert "content prior weight 2 at temperature 0.05" in note and "static_plain" not in note


def _write_results(layout, dataset):
    layout.results.mkdir(parents=True)
    res = _result("test")
    res["dataset"] = dataset
    layout.cold_start_result(0.02).write_text(json.dumps(res))
    m = {"recall@5": 0.01, "ndcg@5": 0.01, "recall@10": 0.02, "ndcg@10": 0.01}
    layout.warm_result.write_text(json.dumps({"dataset": dataset, "methods": {"static": m}}))


@pytest.mark.parametrize(
    ("data", "paper_shown"),
    [
        ({"dataset": "beauty"}, True),
        ({"dataset": "amazon2014", "category": "Beauty"}, True),
        ({"dataset": "amazon2014", "category": "Cell_Phones_and_Accessories"}, False),
        ({"dataset": "interactions", "raw_dir": "/data/mine"}, False),
        ({"dataset": "synthetic"}, False),
    ],
)
def test_report_shows_paper_numbers_only_for_their_datasets_and_names_the_preset(
    tmp_path, data, paper_shown
):
    cfg = config_lib.load_preset("tiny")
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, **data))
    layout = RunLayout(tmp_path)
    _write_results(layout, data["dataset"])
    report.write_report(cfg, layout)
    text = layout.report.read_text()
    assert ("4.29" in text) == paper_shown  # STATIC's Beauty 2% Recall@1
    assert ("TIGER (paper)" in text) == paper_shown
    assert "Preset: `tiny`" in text and '"dataset": "' + data["dataset"] + '"' in text


def test_report_names_the_environment_once_or_per_result_when_they_differ(tmp_path):
    from data.environment import environment

    cfg = config_lib.load_preset("tiny")
    layout = RunLayout(tmp_path)
    _write_results(layout, "synthetic")
    report.write_report(cfg, layout)
    assert "Environment" not in layout.report.read_text()  # results from before the records
    env = environment()
    for path in (layout.cold_start_result(0.02), layout.warm_result):
        path.write_text(json.dumps({**json.loads(path.read_text()), "environment": env}))
    report.write_report(cfg, layout)
    lines = [x for x in layout.report.read_text().splitlines() if x.startswith("- Environment")]
    assert lines == [lines[0]] and f"jax {env['packages']['jax']}" in lines[0], lines
    assert f"({env['cpu_vector_extensions']})" in lines[0] or not env["cpu_vector_extensions"]
    other = {**env, "packages": {**env["packages"], "jax": "0.0.1"}}
    warm = json.loads(layout.warm_result.read_text())
    layout.warm_result.write_text(json.dumps({**warm, "environment": other}))
    report.write_report(cfg, layout)
    lines = [x for x in layout.report.read_text().splitlines() if x.startswith("- Environment")]
    assert len(lines) == 2 and "cold_start_0.02.json" in lines[0] and "warm.json" in lines[1]
    assert "jax 0.0.1" in lines[1] and "jax 0.0.1" not in lines[0]


def test_warm_table_shows_history_excluded_rows_with_sasrec_merged(tmp_path):
    cfg = config_lib.load_preset("tiny")
    layout = RunLayout(tmp_path)
    layout.results.mkdir(parents=True)
    m = {"recall@5": 0.01, "ndcg@5": 0.01, "recall@10": 0.02, "ndcg@10": 0.01}
    x = {"recall@5": 0.03, "ndcg@5": 0.02, "recall@10": 0.04, "ndcg@10": 0.025}
    warm = {"dataset": "beauty", "methods": {"static": m}, "history_excluded": {"static": x}}
    layout.warm_result.write_text(json.dumps(warm))
    sas = {"methods": {"sasrec": m}, "history_excluded": {"sasrec": {**x, "recall@10": 0.05}}}
    layout.sasrec_result.write_text(json.dumps(sas))
    report.write_report(cfg, layout)
    text = layout.report.read_text()
    below = text.split("without each user's own history items")[1]
    assert "| static | 0.0300 | 0.0200 | 0.0400 | 0.0250 |" in below
    assert "| sasrec | 0.0300 | 0.0200 | 0.0500 | 0.0250 |" in below
    above = text.split("without each user's own history items")[0]
    assert "| sasrec | 0.0100 | 0.0100 | 0.0200 | 0.0100 |" in above

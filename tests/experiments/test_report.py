"""The cold-start table: the paper's Recall@1 beside test-split results only."""

from experiments import report


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

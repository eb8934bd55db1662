"""docs/scripts/cold_text_views.py: the content neighbour under other text views on a cold split.
Its row for the preset's view must be the harness's content neighbour on the same split."""

import pytest

from data.splits import validation_split
from experiments import config as config_lib
from experiments.evaluation.baselines import content_metrics
from experiments.evaluation.profile import ContentProfile
from experiments.pipeline.artifacts import load_dataset
from experiments.pipeline.layout import RunLayout
from rqvae.embed import tfidf_rows
from tests.experiments.helpers import prepare_tiny, run_docs_script


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
    assert set(rows) >= {"the preset's TF-IDF", "word 1-grams", "co-occurrence -> text"}
    for name, cells in rows.items():
        for cell in cells:
            if cell:
                r1, r10 = (float(x) for x in cell.split(" / "))
                assert 0 <= r1 <= r10 <= 100, (name, cell)
    layout = RunLayout(w)
    cfg = config_lib.load_json(layout.config)
    ds = load_dataset(layout)
    split = validation_split(ds, 0.1)
    want = content_metrics(
        tfidf_rows(list(ds.catalog.texts), cfg.rqvae),
        split.test_histories,
        split.test_targets,
        split.cold_items,
        k=10,
        profile=ContentProfile.of(cfg.eval),
    )
    assert rows["the preset's TF-IDF"][0] == (
        f"{100 * want['recall@1']:.2f} / {100 * want['recall@10']:.2f}"
    )


def test_bad_input_is_one_line(tmp_path):
    out = run_script(str(tmp_path / "missing"), "0.02")
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        f"cold_text_views: {tmp_path / 'missing' / 'config.json'} is missing; make it with "
        f"`genret prepare --workdir {tmp_path / 'missing'}`"
    ]
    out = run_script(str(tmp_path), "0.9")
    assert out.returncode == 1 and "FRACTION: expected a fraction in (0, 0.5]" in out.stderr

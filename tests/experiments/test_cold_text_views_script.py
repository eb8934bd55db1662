"""docs/scripts/cold_text_views.py: the content neighbour under other text views on a cold split.
Its row for the preset's view must be the harness's content neighbour on the same split."""

import subprocess
import sys
from pathlib import Path

import pytest

from data.splits import validation_split
from experiments import cli
from experiments import config as config_lib
from experiments.evaluation.baselines import content_metrics
from experiments.evaluation.profile import ContentProfile
from experiments.pipeline.artifacts import load_dataset
from experiments.pipeline.layout import RunLayout
from rqvae.embed import tfidf_rows

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs" / "scripts" / "cold_text_views.py"


def run_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )


@pytest.mark.slow
def test_preset_row_is_the_harness_neighbour(tmp_path):
    w = tmp_path / "w"
    assert (
        cli.main(["prepare", "--dataset", "synthetic", "--config", "tiny", "--workdir", str(w)])
        == 0
    )
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
        f"cold_text_views: {tmp_path / 'missing' / 'config.json'}: missing; run "
        f"`genret prepare --workdir {tmp_path / 'missing'}`"
    ]
    out = run_script(str(tmp_path), "0.9")
    assert out.returncode == 1 and "FRACTION: expected a fraction in (0, 0.5]" in out.stderr

"""Shared by the experiments tests: a prepared tiny work directory, a layout whose stages can be
keyed, the docs scripts run as users run them, the harness's content neighbour on a cold-val
split, and the wait for a training process's first checkpoint."""

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def prepare_tiny(workdir: Path) -> Path:
    """`genret prepare` of the synthetic dataset with the `tiny` preset into `workdir`."""
    from experiments import cli

    argv = ["prepare", "--dataset", "synthetic", "--config", "tiny", "--workdir", str(workdir)]
    assert cli.main(argv) == 0
    return workdir


def keyed_layout(root: Path):
    """A RunLayout at `root` whose prepared-data key exists (key "k"), so that `build_stages` can
    key every stage without a prepared dataset."""
    from data import atomic, prepared
    from experiments.pipeline.layout import RunLayout

    layout = RunLayout(root)
    atomic.write_json(layout.prepared / prepared.KEY_FILE, {"key": "k"})
    return layout


def run_docs_script(name: str, *args: str) -> subprocess.CompletedProcess:
    """`python docs/scripts/NAME ARGS...` from the repository root, its output captured."""
    return subprocess.run(
        [sys.executable, str(ROOT / "docs" / "scripts" / name), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )


def wait_for_checkpoint(checkpoints: Path, still_running: Callable[[], None], limit_s=180.0):
    """Returns once `checkpoints` holds a step folder (a training's first save); calls
    `still_running` (which asserts that the process lives) between looks, for `limit_s` at most
    (a loaded CI machine can take minutes to compile and reach the first save)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if checkpoints.is_dir() and any(p.name.isdigit() for p in checkpoints.iterdir()):
            return
        still_running()
        time.sleep(0.01)
    raise AssertionError(f"{checkpoints}: no checkpoint within {limit_s:.0f} s")


def cold_val_neighbour(workdir: Path, fraction: float) -> str:
    """ "R@1 / R@10" (%) of the harness's content neighbour on the cold-val split of a prepared
    `workdir`, as the cold-start docs scripts print it."""
    from data.splits import validation_split
    from experiments import config as config_lib
    from experiments.evaluation.baselines import content_metrics
    from experiments.evaluation.profile import ContentProfile
    from experiments.pipeline.artifacts import load_dataset
    from experiments.pipeline.layout import RunLayout
    from rqvae.embed import tfidf_rows

    layout = RunLayout(workdir)
    cfg = config_lib.load_json(layout.config)
    ds = load_dataset(layout)
    split = validation_split(ds, fraction)
    want = content_metrics(
        tfidf_rows(list(ds.catalog.texts), cfg.rqvae),
        split.test_histories,
        split.test_targets,
        split.cold_items,
        k=10,
        profile=ContentProfile.of(cfg.eval),
    )
    return f"{100 * want['recall@1']:.2f} / {100 * want['recall@10']:.2f}"

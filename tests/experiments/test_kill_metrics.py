"""A training process killed at any moment (SIGKILL, SIGTERM or Ctrl-C; at a step, during a
validation, during a save) and run again ends with the metrics log of a run made in one go, row
for row: no row lost, none twice."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from seqmodel.trainer import Schedule, read_metrics
from tests.seqmodel.test_trainer import _fit

ROOT = Path(__file__).resolve().parents[2]
# Saves at every even step, validations at 4, 8 and 12.
SCHEDULE = {"total": 12, "eval_every": 4, "save_every": 2}
# Measurements of the clock, not of the model: a resumed run's differ.
WALL_CLOCK = ("train_seconds", "tokens_per_s")
SIGNALS = ("SIGKILL", "SIGTERM", "SIGINT")
MOMENTS = ("step", "validation", "save")

# The toy regression of tests/seqmodel/test_trainer.py in a process of its own that sends itself
# SIGNAL at MOMENT of step AT and exits as `genret` does: 143 after SIGTERM, 130 after Ctrl-C.
SCRIPT = """
import gc, json, os, signal, sys
from pathlib import Path

import seqmodel.trainer as trainer
from experiments import cli
from seqmodel.checkpoint import Checkpoints
from tests.seqmodel.test_trainer import _fit

workdir, sig, moment = Path(sys.argv[1]), getattr(signal, sys.argv[2]), sys.argv[3]
at, schedule = int(sys.argv[4]), json.loads(sys.argv[5])
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # a background job's
    signal.signal(signal.SIGINT, signal.default_int_handler)
cli.keep_interrupts()
cli.stop_on_sigterm()


def kill():
    os.kill(os.getpid(), sig)  # a handler (SIGTERM, SIGINT) runs before the next line


def land_in_gc(phase, info):
    # As a Ctrl-C or SIGTERM may land in JAX's garbage-collector callback, where Python cannot
    # raise: cli.keep_interrupts hands it back to the main thread moments later.
    gc.callbacks.remove(land_in_gc)
    raise cli.Terminated if sig == signal.SIGTERM else KeyboardInterrupt


if moment == "step":  # as step AT is sent to the device
    put, count = trainer.Trainer.put, [0]

    def counted_put(self, batch):
        count[0] += 1
        if count[0] == at:
            kill()
        return put(self, batch)

    trainer.Trainer.put = counted_put
elif moment == "validation":  # as validation AT ends
    record = trainer.record_validation

    def recorded(progress, step, score):
        if step == at and sig == signal.SIGKILL:
            kill()
        elif step == at:
            gc.callbacks.append(land_in_gc)
            gc.collect()
        return record(progress, step, score)

    trainer.record_validation = recorded
else:  # in save AT: SIGTERM or Ctrl-C as it begins (held), SIGKILL once step AT has committed
    save = Checkpoints.save

    def killed_save(self, step, *args, **kwargs):
        if step == at:
            write = self.latest.save

            def during(*args, **kwargs):
                self.latest.save = write  # once
                if sig != signal.SIGKILL:
                    kill()  # held by the save until it ends
                written = write(*args, **kwargs)
                if sig == signal.SIGKILL:
                    self.latest.wait_until_finished()  # step AT committed
                    kill()
                return written

            self.latest.save = during
        return save(self, step, *args, **kwargs)

    Checkpoints.save = killed_save
try:
    _fit(workdir, trainer.Schedule(**schedule))
except cli.Terminated:
    os._exit(143)
except KeyboardInterrupt:
    os._exit(130)
os._exit(0)
"""
EXIT = {"SIGKILL": -signal.SIGKILL, "SIGTERM": 143, "SIGINT": 130}


def _rows(workdir: Path) -> list[dict]:
    rows = read_metrics(workdir / "metrics.jsonl")
    return [{k: v for k, v in r.items() if k not in WALL_CLOCK} for r in rows]


def _best_steps(workdir: Path) -> list[int]:
    return sorted(
        int(p.name) for p in (workdir / "checkpoints" / "best").iterdir() if p.name.isdigit()
    )


def _moment_step(signame: str, moment: str) -> int:
    """A step drawn for each (signal, moment), the same in every run of the suite."""
    every = {"step": 1, "validation": SCHEDULE["eval_every"], "save": SCHEDULE["save_every"]}
    steps = np.arange(every[moment], SCHEDULE["total"] + 1, every[moment])
    rng = np.random.default_rng([SIGNALS.index(signame), MOMENTS.index(moment)])
    return int(rng.choice(steps))


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """An uninterrupted run: its rows, its early-stopping record and its best checkpoint's step."""
    workdir = tmp_path_factory.mktemp("straight")
    fitted = _fit(workdir, Schedule(**SCHEDULE))
    rows = _rows(workdir)
    assert [r["step"] for r in rows if "loss" in r] == list(range(1, 13))
    assert [r["step"] for r in rows if "fit" in r] == [4, 8, 12]
    return rows, fitted.progress, _best_steps(workdir)


@pytest.mark.slow
@pytest.mark.parametrize("moment", MOMENTS)
@pytest.mark.parametrize("signame", SIGNALS)
def test_a_killed_run_rerun_logs_the_rows_of_an_uninterrupted_one(
    tmp_path, straight, signame, moment
):
    at = _moment_step(signame, moment)
    args = [str(tmp_path), signame, moment, str(at), json.dumps(SCHEDULE)]
    killed = subprocess.run(
        [sys.executable, "-c", SCRIPT, *args],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == EXIT[signame], (at, killed.returncode, killed.stderr[-3000:])
    resumed = _fit(tmp_path, Schedule(**SCHEDULE))
    rows, progress, best = straight
    assert _rows(tmp_path) == rows, f"{signame} at {moment} {at}: the log differs (a hole?)"
    assert resumed.progress == progress
    assert _best_steps(tmp_path) == best, "the best checkpoint is not the record's best step"

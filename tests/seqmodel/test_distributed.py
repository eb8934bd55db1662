"""Two processes on localhost (jax.distributed, one CPU device each) train the retriever to the
per-step losses of one process on the same global batch, through a checkpoint and a resume."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

_WORKER = r"""
import sys
import jax
import numpy as np

process_id, num_processes = int(sys.argv[1]), int(sys.argv[2])
port, workdir = sys.argv[3], sys.argv[4]
if num_processes > 1:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}",
        num_processes=num_processes,
        process_id=process_id,
        initialization_timeout=60,
    )
    from jax.experimental import multihost_utils
    ids = multihost_utils.process_allgather(np.array([process_id]))
    assert sorted(ids.ravel().tolist()) == list(range(num_processes)), ids
assert jax.process_count() == num_processes and len(jax.local_devices()) == 1
print("INITIALIZED", flush=True)

from seqmodel.train import train_and_evaluate
from tests.seqmodel.test_train import CFG, _data

data = _data()  # built alike in every process: same global batches
first = train_and_evaluate(CFG, workdir, data, stop_after=2, show_progress=False)
assert first.summary["steps"] == 2
# A new run in the same (shared) directory resumes from step 2's checkpoint.
result = train_and_evaluate(CFG, workdir, data, show_progress=False)
assert result.summary["steps"] == CFG.max_steps and result.summary["devices"] == num_processes
print("DONE", flush=True)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(num_processes: int, workdir: Path, timeout: float = 240) -> list[tuple[int, str]]:
    """Runs the worker in `num_processes` fresh CPU-only Pythons; (returncode, output) of each."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    port = str(_free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(i), str(num_processes), port, str(workdir)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(num_processes)
    ]
    results = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=timeout)
            results.append((p.returncode, out))
    finally:
        for p in procs:  # one that failed leaves the other waiting at a barrier
            if p.poll() is None:
                p.kill()
                p.communicate()
    return results


def _logged(workdir: Path) -> list[dict]:
    rows = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
    timing = ("tokens_per_s", "train_seconds")
    return [{k: v for k, v in r.items() if k not in timing} for r in rows]


@pytest.mark.slow
def test_two_processes_train_like_one_on_the_same_global_batch(tmp_path):
    ((code, out),) = _launch(1, tmp_path / "one")
    assert code == 0, out[-3000:]
    two = _launch(2, tmp_path / "two")
    if not all("INITIALIZED" in out for _, out in two):
        pytest.skip(f"this jax cannot run two CPU processes: {two[0][1][-500:]}")
    for i, (code, out) in enumerate(two):
        assert code == 0, f"process {i}:\n{out[-3000:]}"
    one_rows, two_rows = _logged(tmp_path / "one"), _logged(tmp_path / "two")
    assert [r["step"] for r in two_rows] == [r["step"] for r in one_rows]
    for a, b in zip(one_rows, two_rows, strict=True):
        assert a.keys() == b.keys()
        for k in a:  # sums over the batch run in another order across two devices
            np.testing.assert_allclose(b[k], a[k], rtol=1e-5, err_msg=f"step {a['step']}: {k}")
    assert sorted(p.name for p in (tmp_path / "two" / "checkpoints" / "latest").iterdir()) == [
        "2",
        "4",
    ]

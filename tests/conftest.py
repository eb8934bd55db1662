"""Shared fixtures: strict numpy rank promotion, the real-data folder (skipped when absent)."""

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from experiments.runtime import (
    hugepages,
    xla_cache,  # import no JAX
)

# One persistent compilation cache for the run (experiments/runtime/xla_cache.py), made empty by
# the first process of the run that loads this file, shared with the processes it starts
# (pytest-xdist's workers, `genret` subprocesses) and removed when it exits: a program that several
# tests compile alike (the same tiny retriever's train step in a run and in its resumed run)
# compiles once.
# Nothing is read from or left in the user's own cache. Set before JAX is imported, which reads it.
# GENRET_TEST_XLA_CACHE=off runs the suite without any cache.
if "GENRET_TEST_XLA_CACHE" not in os.environ:
    os.environ["GENRET_TEST_XLA_CACHE"] = tempfile.mkdtemp(prefix="genret-test-xla-")
    atexit.register(shutil.rmtree, os.environ["GENRET_TEST_XLA_CACHE"], ignore_errors=True)
os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)  # never the user's own cache
os.environ[xla_cache.ENV] = os.environ["GENRET_TEST_XLA_CACHE"]  # "off": no cache
# Programs that compile in 0.1 s or more are kept (train steps, searches), those faster not (the
# single operations that eager code compiles by the hundred per test): JAX's bounded cache reads
# every entry of the folder on each write, so a folder of every program made the suite's late
# tests several times slower (a whole run took 26 minutes against 15 on 2 cores). The bound only
# makes JAX lock its reads and writes; the folder is never trimmed.
SUITE_MIN_COMPILE_SECONDS = 0.1
xla_cache.enable(max_bytes=4 << 30, min_compile_seconds=SUITE_MIN_COMPILE_SECONDS)
# The workers and `genret` processes get huge pages for their heaps, as `genret` does
# (experiments/runtime/hugepages.py); GENRET_HUGEPAGES=off runs the suite without.
if hugepages.wanted():
    os.environ["GLIBC_TUNABLES"] = hugepages.tunables()

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")

# A suite started in the background by a non-interactive shell inherits SIGINT ignored, so Python
# installs no Ctrl-C handler and the Ctrl-C tests see nothing; give them the interactive default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

AMAZON_ROOT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "amazon2014"


@pytest.fixture
def amazon_root() -> Path:
    """../shared/data/amazon2014; tests using it are skipped where it is absent."""
    if not (AMAZON_ROOT / "Beauty").is_dir():
        pytest.skip(f"real data not found at {AMAZON_ROOT}")
    return AMAZON_ROOT


def run_on_forced_cpu_devices(
    script: str, *, devices: int = 2, timeout: float = 300
) -> subprocess.CompletedProcess:
    """Runs `script` in a fresh Python whose JAX sees `devices` host CPU devices.

    XLA reads the device count only at start-up, hence a subprocess.
    """
    root = Path(__file__).resolve().parents[1]
    env = dict(
        os.environ,
        XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
        JAX_PLATFORMS="cpu",
        PYTHONPATH=str(root),
    )
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@contextlib.contextmanager
def locked_by_another_process(directory: Path):
    """Another Python process holds `directory`'s run lock (data.runlock's flock) inside the block
    and exits at its end, dropping it; an AssertionError if this process still holds it."""
    script = (
        "import fcntl, os, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
        "try:\n"
        "    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "except BlockingIOError:\n"
        "    print('busy', flush=True)\n"
        "    sys.exit(1)\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n"
    )
    Path(directory).mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", script, str(directory)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held", f"{directory} is locked already"
        yield
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)

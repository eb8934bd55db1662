"""A latency mode for small JAX calls on a CPU (`--cpu-cores N`).

One constrained beam-search step on the CPU computes for some tens of microseconds, yet by default
a call costs about 0.24 ms on the 2-core Xeon of docs/BENCHMARKS.md: JAX hands each call to a
worker thread (asynchronous dispatch) and XLA splits every gather from an array over a few hundred
KB across the cores, and waking the other threads takes longer than the work. With the process
pinned to N cores and its calls run on the calling thread, XLA splits over N cores only (none at
N = 1) and nothing is handed over: 0.11 ms a step at 1e5-1e7 items (docs/BENCHMARKS.md, "The
step's time and the latency mode"). Worth it where the calls are small (a search step, a short
search); a server's requests also run the retriever's layers, which gain from every core
(docs/guide/serving.md), and training's large steps want every core and the asynchronous default.

Both settings are read when JAX starts its CPU backend, so this runs before any JAX computation.
"""

import os

import jax

from data.errors import ArgumentError


def cpu_latency_mode(cores: int) -> list[int]:
    """Pins this process to its first `cores` allowed CPUs (all of them if fewer) and turns off
    JAX's asynchronous dispatch on the CPU; returns the CPUs kept. ArgumentError once JAX's
    backends have started (the settings would not take) or where the OS cannot pin a process."""
    from jax._src import xla_bridge

    if cores < 1:
        raise ArgumentError(f"--cpu-cores must be >= 1, got {cores}")
    if xla_bridge.backends_are_initialized():
        raise ArgumentError("--cpu-cores: JAX has started already; it must be set before")
    if not hasattr(os, "sched_setaffinity"):
        raise ArgumentError("--cpu-cores: this OS cannot pin a process to cores")
    allowed = sorted(os.sched_getaffinity(0))
    kept = allowed[:cores]
    os.sched_setaffinity(0, kept)
    jax.config.update("jax_cpu_enable_async_dispatch", False)
    return kept

"""Does compiling several XLA programs in threads beat compiling them one after another on this
machine? Prints the wall and process-CPU seconds of both (docs/BENCHMARKS.md, "End to end").

Usage: python docs/scripts/compile_threads.py [--threads 2] [--repeats 3]
"""

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp


def program(x, w):
    """30 tanh/matmul layers and a gradient: a compile of about a second on a 2-core CPU."""
    for i in range(30):
        x = jnp.tanh(x @ w + i) * jnp.sin(x)
    return jnp.sum(jax.grad(lambda x: jnp.sum(jnp.cos(x @ w) ** 2))(x))


def lowered(width: int, count: int) -> list:
    """`count` programs of distinct shapes (each compiles afresh), lowered but not compiled."""
    return [
        jax.jit(program).lower(jnp.ones((8, width + 8 * k)), jnp.ones((width + 8 * k,) * 2))
        for k in range(count)
    ]


def timed(fn) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    rows = {"loop": [], "threads": []}
    for r in range(args.repeats):
        # Four shapes each way, none compiled before (JAX keeps compiled programs by their
        # text in memory, so even a second lowering of one shape would not compile again).
        width = 64 + 128 * r
        one_by_one, threaded = lowered(width, 4), lowered(width + 4, 4)
        rows["loop"].append(timed(lambda a=one_by_one: [x.compile() for x in a]))
        with ThreadPoolExecutor(args.threads) as ex:
            rows["threads"].append(timed(lambda b=threaded: list(ex.map(lambda x: x.compile(), b))))
    for name, runs in rows.items():
        walls = ", ".join(f"{w:.2f}" for w, _ in runs)
        cpus = ", ".join(f"{c:.2f}" for _, c in runs)
        print(
            f"{name}: wall {walls} (median {statistics.median(w for w, _ in runs):.2f}) s; "
            f"CPU {cpus} (median {statistics.median(c for _, c in runs):.2f}) s"
        )


if __name__ == "__main__":
    main()

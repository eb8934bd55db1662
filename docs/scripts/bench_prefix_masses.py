"""The content prior's prefix masses: the first version's np.add.at loop against the sparse
incidence product of decoding.prefix_prior, timed in the same run (median of 7 after a warm-up),
on 64 rows and random distinct 4-level SIDs. Usage: python docs/scripts/bench_prefix_masses.py"""

import time

import numpy as np

from decoding import PrefixTable


def add_at(t: PrefixTable, lp: np.ndarray) -> np.ndarray:
    p = np.exp(lp - lp.max(axis=1, keepdims=True))
    mass = np.zeros((lp.shape[0], t.num_nodes))
    mass[:, 0] = p.sum(axis=1)
    for level in range(t.item_nodes.shape[1]):
        np.add.at(mass.T, t.item_nodes[:, level], p.T)
    return mass


def sparse(t: PrefixTable, lp: np.ndarray) -> np.ndarray:
    p = np.exp(lp - lp.max(axis=1, keepdims=True))
    return np.asarray((t._incidence.T @ p.T).T)


def median_ms(fn, *args, reps: int = 7) -> float:
    fn(*args)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times))


def main() -> None:
    rng = np.random.default_rng(0)
    print("items V nodes | add.at ms | sparse ms | whole conditional_log_prior ms (64 rows)")
    for N, V in ((606, 64), (3000, 256)):
        t = PrefixTable.build(np.unique(rng.integers(0, V, (2 * N, 4)), axis=0)[:N], V)
        lp = rng.normal(size=(64, N)) * 10
        np.testing.assert_allclose(add_at(t, lp), sparse(t, lp), rtol=1e-12)
        whole = median_ms(t.conditional_log_prior, lp)
        print(
            N,
            V,
            t.num_nodes,
            "|",
            *(f"{median_ms(f, t, lp):.2f} |" for f in (add_at, sparse)),
            f"{whole:.2f}",
        )


if __name__ == "__main__":
    main()

"""What a number was computed with: the versions of the libraries whose arithmetic it depends on,
the interpreter, the processor. Written beside every training summary and evaluation result, so a
run that does not reproduce "to the digit" can be told apart from one made elsewhere."""

import functools
import importlib.metadata
import os
import platform

# The distributions whose code computes or orders the numbers we report.
PACKAGES = (
    "jax",
    "jaxlib",
    "flax",
    "optax",
    "orbax-checkpoint",
    "numpy",
    "scipy",
    "scikit-learn",
    "tensorflow-datasets",
    "grain",
    "genret",
)


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpuinfo(field: str) -> str | None:
    """The value of the first line of Linux's /proc/cpuinfo that starts with `field`; None
    where there is no such file or line."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(field):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _cpu_model() -> str:
    """The processor's model name (Linux's /proc/cpuinfo), else what `platform` knows."""
    model = _cpuinfo("model name")
    return model if model is not None else platform.processor() or platform.machine()


# Vector instruction sets beside the avx* and amx* flags.
_OTHER = ("fma", "f16c")


def _cpu_vector_extensions() -> str | None:
    """The vector instruction sets the processor reports (Linux's /proc/cpuinfo flags: AVX,
    AVX2, AVX-512's parts, AMX, FMA, F16C), space-separated; None where unknown.

    XLA compiles for the processor it runs on, so these decide the floats as much as the
    versions do: the same code, seed and data train Sports' retriever to other numbers on two
    machines that both report "AMD EPYC", one with AVX-512 and one without."""
    flags = _cpuinfo("flags")
    if flags is None:
        return None
    wanted = (f for f in flags.split() if f.startswith(("avx", "amx")) or f in _OTHER)
    return " ".join(sorted(set(wanted)))


@functools.cache
def environment() -> dict:
    """Package versions (None for one not installed), Python, OS, processor, its vector
    instruction sets and its core count."""
    return {
        "packages": {name: _version(name) for name in PACKAGES},
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_vector_extensions": _cpu_vector_extensions(),
        "cpu_count": os.cpu_count(),
    }


# The fields of a record that describe the machine and interpreter (the rest: package versions).
MACHINE_KEYS = ("python", "platform", "cpu", "cpu_vector_extensions", "cpu_count")


def _changed(x: dict, y: dict, keys) -> list[str]:
    """One 'key: x -> y' line for each of `keys` whose values differ, in the order of `keys`."""
    return [f"{k}: {x.get(k)} -> {y.get(k)}" for k in keys if x.get(k) != y.get(k)]


def package_differences(a: dict | None, b: dict | None) -> list[str]:
    """The package versions that differ between two environment records, one 'name: a -> b'
    line each; an absent record (a result written before environments were recorded) differs in
    nothing it can name."""
    if not a or not b:
        return []
    pa, pb = a.get("packages", {}), b.get("packages", {})
    return _changed(pa, pb, sorted(set(pa) | set(pb)))


def machine_differences(a: dict | None, b: dict | None) -> list[str]:
    """The fields of MACHINE_KEYS that differ, one 'field: a -> b' line each; a field that one
    record lacks (written before it was recorded) is not compared."""
    if not a or not b:
        return []
    return _changed(a, b, [k for k in MACHINE_KEYS if k in a and k in b])


def differences(a: dict | None, b: dict | None) -> list[str]:
    """Everything that differs between two environment records: packages, then the machine."""
    return package_differences(a, b) + machine_differences(a, b)

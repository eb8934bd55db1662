"""JAX's persistent compilation cache for the `genret` command.

XLA compiles each jitted program once per process; a retriever's train step compiles once per
length bucket (about 5 s each on the 2-core CPU), and its seed and schedule length are arguments
of the program (seqmodel.train.make_trainer). With the cache on, a program compiled once is read
back from disk by every later stage and run: the same executable, so the same numbers to the
digit (docs/BENCHMARKS.md, "End to end"); an ensemble's later seeds and a pipeline's later
retrievers compile nothing for the length buckets they share with an earlier one.

Where: `$GENRET_COMPILE_CACHE` when set (a folder; `off`, `0`, `false`, `no` or empty turn the
cache off), else `$XDG_CACHE_HOME/genret/xla`, else `~/.cache/genret/xla`; a user's own
JAX_COMPILATION_CACHE_DIR wins over all three. The folder is kept under MAX_BYTES, least recently
used entries dropped first. Set by environment variables, which JAX reads when it is imported, so
that commands that never compile (`--help`) do not import it.

JAX writes an entry in place: a command killed in the milliseconds of a write can leave one cut
short, which later commands skip with a warning ("Error reading persistent compilation cache
entry") and compile instead; removing the folder ends the warnings.
"""

import os
from pathlib import Path

ENV = "GENRET_COMPILE_CACHE"
OFF = ("", "0", "off", "false", "no")
MAX_BYTES = 1 << 30


def switched_off(environ, name: str) -> bool:
    """Whether the variable `name` is set to one of OFF (an empty value included): how every
    `genret` switch (GENRET_COMPILE_CACHE, GENRET_HUGEPAGES) reads an off."""
    return name in environ and environ[name].strip().lower() in OFF


def cache_dir(environ=os.environ) -> Path | None:
    """The cache folder that `environ` asks for; None when the cache is off."""
    if switched_off(environ, ENV):
        return None
    if ENV in environ:
        return Path(environ[ENV].strip()).expanduser()
    base = environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(base) / "genret" / "xla"


def enable(
    environ=os.environ, *, max_bytes: int = MAX_BYTES, min_compile_seconds: float | None = None
) -> Path | None:
    """Turns the cache on for this process and its children (call before JAX is imported);
    returns its folder, or None when it is off, or its folder cannot be made or written (the
    command then compiles as it would without).

    `max_bytes` bounds the folder unless JAX_COMPILATION_CACHE_MAX_SIZE is set already;
    `min_compile_seconds`, when given, replaces JAX's own threshold (1 s) below which a program
    is not written (the tests' programs compile in milliseconds)."""
    if "JAX_COMPILATION_CACHE_DIR" in environ:
        return Path(environ["JAX_COMPILATION_CACHE_DIR"])
    path = cache_dir(environ)
    if path is None:
        return None
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    if not os.access(path, os.W_OK | os.X_OK):
        return None
    environ["JAX_COMPILATION_CACHE_DIR"] = str(path)
    environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(max_bytes))
    if min_compile_seconds is not None:
        environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = str(min_compile_seconds)
    return path

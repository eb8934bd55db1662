"""Transparent huge pages for the `genret` command's heap (glibc's `malloc.hugetlb` tunable).

XLA's CPU runtime allocates and frees large buffers through malloc at every step; glibc hands such
memory back to the kernel and the next step faults it in again, one 4 KiB page at a time (the
synthetic default: 36 million page faults and 12% of its CPU seconds in the kernel; numpy asks for
huge pages for its own large arrays already). With `glibc.malloc.hugetlb=1` malloc asks for
transparent huge pages too, so one fault maps 2 MiB: 0.9 million faults and 6% in the kernel, 3-9%
fewer CPU seconds in all (docs/BENCHMARKS.md, "End to end"). Where memory lies changes, not what
is computed: every number of the synthetic pipeline and of a Beauty retriever's first 60 steps
stayed the same to the last digit.

glibc reads its tunables only when a process starts, so `genret` starts itself once more with
GLIBC_TUNABLES extended (the same process id, arguments and streams). It does so only where it
helps: Linux with glibc 2.35 or later, the kernel's transparent huge pages not `never`, and the
tunable not set already. GENRET_HUGEPAGES=off (or 0, false, no, empty) turns it off, read as
GENRET_COMPILE_CACHE is.
"""

import os
import platform
import sys
from pathlib import Path

from experiments.runtime.xla_cache import switched_off

ENV = "GENRET_HUGEPAGES"
TUNABLE = "glibc.malloc.hugetlb"
THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def thp_mode(path: Path = THP_MODE) -> str | None:
    """The kernel's transparent huge page mode (always, madvise or never), None if unknown."""
    try:
        text = path.read_text()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else None


def glibc_supports_it() -> bool:
    """glibc 2.35 added the tunable (older ones ignore it)."""
    lib, version = platform.libc_ver()
    if lib != "glibc":
        return False
    try:
        major, minor = (int(part) for part in version.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (2, 35)


def wanted(environ=os.environ, *, mode: str | None = None, glibc: bool | None = None) -> bool:
    """Whether a restart with the tunable would help this process (`mode`, `glibc`: for tests)."""
    if switched_off(environ, ENV):
        return False
    if TUNABLE in environ.get("GLIBC_TUNABLES", ""):
        return False  # set already: by the user, or by the restart itself
    if not sys.platform.startswith("linux"):
        return False
    mode = thp_mode() if mode is None else mode
    glibc = glibc_supports_it() if glibc is None else glibc
    return glibc and mode in ("always", "madvise")


def tunables(environ=os.environ) -> str:
    """GLIBC_TUNABLES with the huge-page tunable added to any the user set."""
    own = environ.get("GLIBC_TUNABLES", "")
    return f"{own}:{TUNABLE}=1" if own else f"{TUNABLE}=1"


def restart_with_hugepages(argv: list[str] | None = None, environ=os.environ) -> None:
    """Replaces this process by `python argv...` with the tunable set, when `wanted()`; returns
    (doing nothing) otherwise, or when argv[0] is not the `genret` script (a test runner that
    calls `console()` is never started again)."""
    argv = sys.argv if argv is None else argv
    if not argv or Path(argv[0]).name != "genret" or not Path(argv[0]).is_file():
        return
    if not wanted(environ):
        return
    env = dict(environ, GLIBC_TUNABLES=tunables(environ))
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, [sys.executable, *argv], env)
    except OSError:
        return  # cannot start again: run as we are

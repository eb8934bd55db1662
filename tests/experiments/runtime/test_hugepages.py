"""experiments.runtime.hugepages: when `genret` starts itself again with glibc's huge-page
tunable, and that the process it becomes gets huge pages for its heap."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.runtime import hugepages
from experiments.runtime.xla_cache import switched_off

ROOT = Path(__file__).resolve().parents[3]


def test_thp_mode_reads_the_bracketed_word(tmp_path):
    f = tmp_path / "enabled"
    f.write_text("always [madvise] never\n")
    assert hugepages.thp_mode(f) == "madvise"
    f.write_text("[always] madvise never\n")
    assert hugepages.thp_mode(f) == "always"
    f.write_text("garbled\n")
    assert hugepages.thp_mode(f) is None
    assert hugepages.thp_mode(tmp_path / "missing") is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
def test_wanted_only_where_it_helps_and_not_twice():
    yes = dict(mode="madvise", glibc=True)
    assert hugepages.wanted({}, **yes)
    assert hugepages.wanted({}, mode="always", glibc=True)
    assert not hugepages.wanted({}, mode="never", glibc=True)
    assert not hugepages.wanted({}, mode="madvise", glibc=False)
    for off in ("off", "OFF", "0", "false", "no", "", " "):
        assert not hugepages.wanted({"GENRET_HUGEPAGES": off}, **yes), off
    assert hugepages.wanted({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, **yes)
    assert not hugepages.wanted({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, **yes)


def test_tunables_keep_the_users_own():
    assert hugepages.tunables({}) == "glibc.malloc.hugetlb=1"
    own = {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}
    assert hugepages.tunables(own) == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"


def test_only_the_genret_script_starts_again(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(os, "execve", lambda *a: calls.append(a))
    monkeypatch.setattr(hugepages, "wanted", lambda environ: True)
    other = tmp_path / "pytest"
    other.write_text("")
    hugepages.restart_with_hugepages([str(other), "-q"], {})
    hugepages.restart_with_hugepages([str(tmp_path / "genret")], {})  # no such file
    assert calls == []
    script = tmp_path / "genret"
    script.write_text("")
    hugepages.restart_with_hugepages([str(script), "pipeline", "--help"], {"A": "1"})
    ((exe, argv, env),) = calls
    assert exe == sys.executable and argv == [sys.executable, str(script), "pipeline", "--help"]
    assert env == {"A": "1", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}


def test_the_restarted_process_gets_huge_pages(tmp_path):
    if not (sys.platform.startswith("linux") and hugepages.glibc_supports_it()):
        pytest.skip("needs Linux with glibc >= 2.35")
    if hugepages.thp_mode() not in ("always", "madvise"):
        pytest.skip(f"transparent huge pages are {hugepages.thp_mode()!r} here")
    # A stand-in `genret` script: restarts itself as console() does, then touches a large heap
    # buffer and reports the huge pages it holds and the tunable it saw.
    script = tmp_path / "genret"
    script.write_text(
        "import os, sys\n"
        "from experiments.runtime import hugepages\n"
        "hugepages.restart_with_hugepages()\n"
        "import ctypes\n"
        "libc = ctypes.CDLL(None)\n"
        "libc.malloc.restype = ctypes.c_void_p\n"
        "p = libc.malloc(64 << 20)\n"  # malloc itself: numpy madvises its own large arrays
        "ctypes.memset(p, 1, 64 << 20)\n"
        "rollup = open('/proc/self/smaps_rollup').read().split()\n"
        "huge_kb = int(rollup[rollup.index('AnonHugePages:') + 1])\n"
        "print(os.getpid(), os.environ.get('GLIBC_TUNABLES'), huge_kb)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "GENRET_HUGEPAGES")}
    env["PYTHONPATH"] = str(ROOT)

    def run(**extra) -> list[str]:
        proc = subprocess.Popen(
            [sys.executable, str(script)],
            env={**env, **extra},
            stdout=subprocess.PIPE,
            text=True,
        )
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        pid, *rest = out.split()
        assert int(pid) == proc.pid  # started again in place, not as a child
        return rest

    tunables, huge_kb = run()
    assert tunables == "glibc.malloc.hugetlb=1"
    assert int(huge_kb) >= 2048  # at least one 2 MiB page behind the 64 MiB buffer
    tunables, huge_kb = run(GENRET_HUGEPAGES="off")
    assert tunables == "None" and int(huge_kb) == 0


def test_the_suite_runs_with_huge_pages_where_genret_would():
    # tests/conftest.py sets the tunable for the processes it starts (xdist workers, `genret`).
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if switched_off(os.environ, hugepages.ENV):
        assert hugepages.TUNABLE not in tunables
    elif sys.platform.startswith("linux") and hugepages.glibc_supports_it():
        assert (hugepages.TUNABLE in tunables) == (hugepages.thp_mode() in ("always", "madvise"))

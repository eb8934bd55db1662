"""Stage ledger: skip when up to date; rerun downstream after an upstream or output change."""

import pytest

from data.errors import StageError
from data.fingerprint import file_digest
from experiments.pipeline import ledger
from experiments.pipeline.workflow import run_stages


def _writer(tmp_path, calls, name):
    """A stage body that logs its call and writes its one output."""

    def run():
        calls.append(name)
        (tmp_path / name).write_text(name)

    return run


def _make(tmp_path, calls, a_param=1):
    return [
        ledger.Stage("a", (a_param,), (tmp_path / "a",), _writer(tmp_path, calls, "a")),
        ledger.Stage("b", (), (tmp_path / "b",), _writer(tmp_path, calls, "b")),
    ]


def test_second_run_skips_everything(tmp_path):
    calls = []
    run_stages(_make(tmp_path, calls), tmp_path / "stages.json", log=lambda s: None)
    run_stages(_make(tmp_path, calls), tmp_path / "stages.json", log=lambda s: None)
    assert calls == ["a", "b"]


def test_upstream_change_reruns_downstream(tmp_path):
    calls = []
    run_stages(_make(tmp_path, calls), tmp_path / "stages.json", log=lambda s: None)
    run_stages(_make(tmp_path, calls, a_param=2), tmp_path / "stages.json", log=lambda s: None)
    assert calls == ["a", "b", "a", "b"]


def test_missing_output_reruns_only_that_stage(tmp_path):
    calls = []
    run_stages(_make(tmp_path, calls), tmp_path / "stages.json", log=lambda s: None)
    (tmp_path / "b").unlink()
    run_stages(_make(tmp_path, calls), tmp_path / "stages.json", log=lambda s: None)
    assert calls == ["a", "b", "b"]


def test_killed_stage_is_not_recorded(tmp_path):
    calls = []

    def boom():
        raise KeyboardInterrupt

    failing = [ledger.Stage("a", (), (tmp_path / "a",), boom)]
    try:
        run_stages(failing, tmp_path / "stages.json", log=lambda s: None)
    except KeyboardInterrupt:
        pass
    assert "a" not in ledger.Ledger(tmp_path / "stages.json").entries
    run_stages(_make(tmp_path, calls), tmp_path / "stages.json", log=lambda s: None)
    assert calls == ["a", "b"]


def test_file_digest_tracks_content(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_text("1")
    first = file_digest(tmp_path / "d")
    (tmp_path / "d" / "x").write_text("2")
    assert file_digest(tmp_path / "d") != first


def test_independent_branches_do_not_rerun_each_other(tmp_path):
    calls = []

    def make(p):
        def stage(name, parts=(), after=()):
            return ledger.Stage(
                name, parts, (tmp_path / name,), _writer(tmp_path, calls, name), after=after
            )

        return [stage("root"), stage("x", (p,), ("root",)), stage("y", (), ("root",))]

    run_stages(make(1), tmp_path / "stages.json", log=lambda s: None)
    run_stages(make(2), tmp_path / "stages.json", log=lambda s: None)
    assert calls == ["root", "x", "y", "x"]


def test_empty_after_has_no_upstream_but_none_follows_the_previous(tmp_path):
    calls = []

    def make(p):
        def stage(name, parts=(), after=None):
            return ledger.Stage(
                name, parts, (tmp_path / name,), _writer(tmp_path, calls, name), after=after
            )

        # "next" follows the stage before it (after=None); "own" has no upstream (after=()).
        return [stage("first", (p,)), stage("next"), stage("own", (), ())]

    run_stages(make(1), tmp_path / "stages.json", log=lambda s: None)
    run_stages(make(2), tmp_path / "stages.json", log=lambda s: None)
    assert calls == ["first", "next", "own", "first", "next"]


def test_output_that_no_longer_loads_reruns(tmp_path):
    calls, logs = [], []

    def check():
        if (tmp_path / "a").read_text() != "a":
            raise ValueError("truncated")

    def make():
        return [
            ledger.Stage("a", (), (tmp_path / "a",), _writer(tmp_path, calls, "a"), check=check)
        ]

    run_stages(make(), tmp_path / "stages.json", log=logs.append)
    (tmp_path / "a").write_text("")  # same key, output present, but damaged
    run_stages(make(), tmp_path / "stages.json", log=logs.append)
    assert calls == ["a", "a"]
    assert any("no longer loads" in line and "truncated" in line for line in logs), logs


def test_stage_failure_names_the_stage(tmp_path):
    def boom():
        raise ValueError("bad line 3\nmore detail")

    failing = [ledger.Stage("tokenizer", (), (tmp_path / "a",), boom)]
    with pytest.raises(StageError, match=r"^stage tokenizer: ValueError: bad line 3$"):
        run_stages(failing, tmp_path / "stages.json", log=lambda s: None)
    assert not (tmp_path / "stages.json").exists()


class _Script:
    """A stage's process for `run_stages(launch=)`: `python -c SCRIPT` in tmp_path."""

    def __init__(self, tmp_path, script: str, error: str = ""):
        import subprocess
        import sys

        self._error = error
        self._process = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path)

    def poll(self):
        return self._process.poll()

    def interrupt(self):
        import signal

        if self._process.poll() is None:
            self._process.send_signal(signal.SIGINT)

    def wait(self):
        return self._process.wait(timeout=60)

    def error(self):
        return self._error


def _waits_for(other: str, name: str) -> str:
    """Marks itself started, waits (at most 30 s) until `other` has started, writes its output:
    it finishes only when the two run at the same time."""
    return (
        "import pathlib, sys, time\n"
        f"pathlib.Path('{name}.started').touch()\n"
        "end = time.time() + 30\n"
        f"while not pathlib.Path('{other}.started').exists():\n"
        "    if time.time() > end: sys.exit(3)\n"
        "    time.sleep(0.01)\n"
        f"pathlib.Path('{name}').write_text('{name}')\n"
    )


def test_stages_that_wait_on_nothing_run_side_by_side_and_the_rest_in_order(tmp_path):
    """x and y each finish only while the other runs; z comes after both and sees their outputs;
    a second run starts no process."""
    logs, launched = [], []

    def launch(stage):
        launched.append(stage.name)
        if stage.name == "z":
            return _Script(
                tmp_path,
                "import pathlib; a = pathlib.Path('x').read_text()\n"
                "pathlib.Path('z').write_text(a + pathlib.Path('y').read_text())",
            )
        return _Script(tmp_path, _waits_for("y" if stage.name == "x" else "x", stage.name))

    def make():
        def stage(name, after):
            return ledger.Stage(name, (), (tmp_path / name,), lambda: None, after=after)

        return [stage("x", ()), stage("y", ()), stage("z", ("x", "y"))]

    path = tmp_path / "stages.json"
    timings = run_stages(make(), path, log=logs.append, jobs=2, launch=launch)
    assert (tmp_path / "z").read_text() == "xy"
    assert launched == ["x", "y", "z"] and set(timings) == {"x", "y", "z"}
    assert set(ledger.Ledger(path).entries) == {"x", "y", "z"}
    assert logs[:2] == ["[x] running (in its own process)", "[y] running (in its own process)"]
    run_stages(make(), path, log=logs.append, jobs=2, launch=launch)
    assert launched == ["x", "y", "z"]
    # One at a time (jobs=1) the same stages run in this process: run(), not launch().
    assert run_stages(make(), tmp_path / "other.json", jobs=1, launch=launch) is not None
    assert launched == ["x", "y", "z"]


def test_a_failing_stage_interrupts_the_one_beside_it_and_records_neither(tmp_path):
    def launch(stage):
        if stage.name == "bad":
            return _Script(tmp_path, "import sys; sys.exit(1)", error="bad line 3 of items.json")
        # Runs until interrupted (SIGINT: KeyboardInterrupt, exit code 1).
        return _Script(tmp_path, "import time\nwhile True: time.sleep(0.01)")

    made = [
        ledger.Stage("long", (), (tmp_path / "long",), lambda: None, after=()),
        ledger.Stage("bad", (), (tmp_path / "bad",), lambda: None, after=()),
        ledger.Stage("next", (), (tmp_path / "next",), lambda: None, after=("bad",)),
    ]
    with pytest.raises(StageError, match=r"^stage bad: bad line 3 of items.json$"):
        run_stages(made, tmp_path / "stages.json", log=lambda s: None, jobs=2, launch=launch)
    assert not (tmp_path / "stages.json").exists()


def test_a_stage_that_ends_well_without_its_output_is_an_error(tmp_path):
    made = [ledger.Stage("a", (), (tmp_path / "a",), lambda: None)]
    with pytest.raises(StageError, match="finished without writing"):
        run_stages(
            made,
            tmp_path / "stages.json",
            log=lambda s: None,
            jobs=2,
            launch=lambda stage: _Script(tmp_path, "pass"),
        )


def test_a_stage_alone_runs_here_with_no_other_beside_it(tmp_path):
    """x and g start together; when x has ended, e (alone) and y are ready but g still runs (it
    waits for y), so y starts and e waits until g and y have ended; e runs in this process."""
    order = []

    def launch(stage):
        order.append(stage.name)
        if stage.name == "g":  # ends only once y has started
            return _Script(tmp_path, _waits_for("y", "g"))
        script = (
            f"import pathlib; pathlib.Path('{stage.name}.started').touch()\n"
            f"pathlib.Path('{stage.name}').write_text('{stage.name}')"
        )
        return _Script(tmp_path, script)

    def alone():
        order.append("e")
        running = [n for n in ("x", "y", "g") if not (tmp_path / n).exists()]
        (tmp_path / "e").write_text(",".join(running))

    made = [
        ledger.Stage("x", (), (tmp_path / "x",), lambda: None, after=()),
        ledger.Stage("e", (), (tmp_path / "e",), alone, after=("x",), alone=True),
        ledger.Stage("y", (), (tmp_path / "y",), lambda: None, after=("x",)),
        ledger.Stage("g", (), (tmp_path / "g",), lambda: None, after=()),
    ]
    logs = []
    run_stages(made, tmp_path / "stages.json", log=logs.append, jobs=2, launch=launch)
    assert order == ["x", "g", "y", "e"]
    assert (tmp_path / "e").read_text() == ""  # x, y and g had all ended
    assert "[e] running" in logs and "[y] running (in its own process)" in logs

"""One stage of `genret pipeline` in a process of its own, and the pipeline's handle on it
(StageProcess): how the pipeline runs stages side by side (config `jobs` > 1). Started by
experiments.pipeline.workflow, not by users: the resolved config arrives as JSON on stdin, and a
failure's reason, one line, goes to --error-file.

Usage: python -m experiments.pipeline.stage_worker WORKDIR STAGE --error-file FILE < config.json
Exit codes: 0 done, 1 failed (the reason in FILE), 130 interrupted (Ctrl-C, SIGINT or
SIGTERM).
"""

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from experiments.runtime import xla_cache


def stop_with_parent() -> None:
    """On Linux: this process gets SIGINT, as from Ctrl-C, when the process that started it ends
    (killed with SIGKILL included), so a stage never trains on unwatched by a pipeline that
    would record it; a parent gone already is an interrupt now. Elsewhere nothing."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGINT)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it ended before the call
        raise KeyboardInterrupt


def interrupt_handlers(ignored: bool, parent: int):
    """The SIGINT and SIGTERM handlers of a worker whose pipeline is `parent`.

    SIGINT: Ctrl-C's KeyboardInterrupt; but where the worker started with SIGINT ignored (its
    pipeline did, as a background job of a shell script does), only stop_with_parent's, sent once
    the pipeline is gone. A Ctrl-C to the process group is then ignored by every process of the
    pipeline, as by a pipeline of one process. SIGTERM: the pipeline's own request to stop (a stage
    beside it failed, or a Ctrl-C reached the pipeline), a KeyboardInterrupt always; after one, a
    SIGINT is honoured too (cli.keep_interrupts hands an interrupt that landed where Python cannot
    raise back as SIGINT).
    """
    asked = []

    def on_request(signum, frame):
        asked.append(signum)
        raise KeyboardInterrupt

    if not ignored:
        return signal.default_int_handler, on_request

    def when_orphaned(signum, frame):
        if asked or os.getppid() != parent:
            raise KeyboardInterrupt

    return when_orphaned, on_request


class StageProcess:
    """The pipeline's side of a worker: the stage run by `python -m
    experiments.pipeline.stage_worker` (workflow.StageProcess)."""

    def __init__(self, cfg, layout, stage):
        from experiments import config as config_lib  # the worker imports it after xla_cache

        fd, name = tempfile.mkstemp(prefix="genret-stage-", suffix=".txt")
        os.close(fd)
        self._error = Path(name)
        command = [
            sys.executable,
            "-m",
            "experiments.pipeline.stage_worker",
            str(layout.root),
            stage.name,
        ]
        self._process = subprocess.Popen(
            [*command, "--error-file", str(self._error)], stdin=subprocess.PIPE, text=True
        )
        try:
            self._process.stdin.write(json.dumps(config_lib.to_dict(cfg)))
            self._process.stdin.close()
        except BrokenPipeError:  # it ended before reading: its exit code says why
            pass

    def poll(self) -> int | None:
        return self._process.poll()

    def interrupt(self, grace: float = 2.0) -> None:
        # A Ctrl-C at the terminal reaches it too (the same process group): `grace` seconds to
        # stop by that one; then SIGTERM, which the worker honours as a Ctrl-C even where it
        # ignores SIGINT (a background job), and which a checkpoint save in flight holds as it
        # holds the first Ctrl-C, never taking it for a second.
        try:
            self._process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self._process.send_signal(signal.SIGTERM)

    def wait(self, timeout: float = 300.0) -> int:
        try:
            return self._process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            return self._process.wait()

    def error(self) -> str:
        code = self._process.poll()
        text = self._error.read_text().strip() if self._error.exists() else ""
        self._error.unlink(missing_ok=True)
        if text:
            return text
        if code is not None and code < 0:
            hint = " (killed: out of memory?)" if -code == signal.SIGKILL else ""
            return f"its process ended by signal {-code}{hint}"
        return f"its process ended with exit code {code}"

    def __del__(self):
        self._error.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.pipeline.stage_worker")
    parser.add_argument("workdir", type=Path)
    parser.add_argument("stage")
    parser.add_argument("--error-file", type=Path, required=True)
    args = parser.parse_args(argv)
    on_int, on_term = interrupt_handlers(
        signal.getsignal(signal.SIGINT) is signal.SIG_IGN, os.getppid()
    )
    handlers = {signal.SIGINT: on_int, signal.SIGTERM: on_term}
    # A Ctrl-C in the seconds JAX takes to import is noted, not raised: raised inside jaxlib's
    # C++ module set-up it would abort the process with a C++ traceback. Then: exit code 130.
    noted = []

    def note(signum, frame):
        try:
            handlers[signum](signum, frame)
        except KeyboardInterrupt:
            noted.append(True)

    for signum in handlers:
        signal.signal(signum, note)
    stop_with_parent()
    from data import atomic
    from experiments import cli
    from experiments import config as config_lib
    from experiments.pipeline import workflow
    from experiments.pipeline.layout import RunLayout

    for signum, handler in handlers.items():
        signal.signal(signum, handler)
    cli.keep_interrupts()
    if noted:
        return 130
    try:
        cfg = config_lib.from_dict(config_lib.Config, json.loads(sys.stdin.read()))
        built = workflow.build_stages(cfg, RunLayout(args.workdir), progress=False)
        stage = {s.name: s for s in built}[args.stage]
        stage.run()
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        # A user's error or the outside world's (a full disk, memory, a symlink loop): one line.
        culprit = e if isinstance(e, cli.USER_ERRORS) else cli.outside_error(e)
        if culprit is not None:
            atomic.write_text(args.error_file, cli.one_line(culprit))
            return 1
        # A bug: one line, and the way to its traceback.
        atomic.write_text(
            args.error_file,
            f"internal error: {cli.one_line(e)} (rerun with --jobs 1 --debug for the traceback)",
        )
        return 1
    return 0


if __name__ == "__main__":
    xla_cache.enable()  # the pipeline's own setting, which this process inherits, wins
    try:
        code = main()
    except KeyboardInterrupt:  # before the stage began: nothing to keep
        code = 130
    # As genret's console(): no interpreter shutdown under an XLA thread still compiling.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

"""The `genret` command: `genret X` runs experiments/commands/X.py (dashes become underscores),
a module with add_arguments(parser) and run(args).

Every failure is one line on stderr and a non-zero exit: 1 for an error, 2 for bad usage, 130 for
Ctrl-C, 143 for SIGTERM (`kill`, a scheduler's preemption: stopped as by Ctrl-C); `--debug` shows
the traceback instead.
"""

import argparse
import contextlib
import errno
import importlib
import importlib.metadata
import os
import re
import shutil
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from data.errors import GenretError, os_error_in, os_reason

# group -> {command: one-line help}, in the order `genret --help` lists them. Command modules are
# imported only when their command runs.
GROUPS = {
    "pipeline and its stages": {
        "pipeline": "prepare, tokenizer, retrievers, evaluations and report",
        "prepare": "read raw review/meta files and write the prepared dataset",
        "data-stats": "print dataset and cold-start statistics as JSON",
        "train-tokenizer": "embed item texts, train RQ-VAE, write SIDs",
        "train-retriever": "train the decoder retriever on a split",
        "eval-cold-start": "cold-start Recall@K: unconstrained, random, STATIC",
        "eval-warm": "leave-one-out Recall/NDCG@5/10 (the TIGER benchmark)",
        "report": "write results/report.md from the results present",
    },
    "evaluation and tuning": {
        "eval-baselines": "model-free cold-start baselines (random, content neighbour)",
        "sasrec": "the SASRec baseline: train, rank leave-one-out",
        "parallel": "RPG-style retriever of long PQ codes: train, rank leave-one-out",
        "diagnose": "validation-only diagnostics: per-level accuracy, ensembles, priors",
        "train-draft": "train a NEZHA draft head on a frozen trained retriever",
    },
    "benchmarks": {
        "bench-constraints": "latency/memory of constraint methods",
        "bench-sweep": "the STATIC paper's latency sweeps + plots",
        "bench-decode": "latency and quality per user: beam search vs the draft decoders",
        "bench-labels": "per-step label-set mask vs Python tries",
        "bench-live": "live index: toggle latency, per-request vs STATIC",
        "bench-membership": "SID membership on device: hash set vs STATIC vs binary search",
        "bench-train": "retriever training speed: ms/step, tokens/s, s/epoch",
    },
    "serving": {
        "serve": "HTTP JSON recommendations with live item toggles",
        "load-test": "loopback load test of `genret serve` under toggles",
    },
    "tools": {
        "classify": "item text -> category paths, free vs label-constrained",
    },
}
COMMANDS = {name: text for group in GROUPS.values() for name, text in group.items()}

# Builtin errors that mean bad input, a missing file or a full disk, raised by code outside the
# project (numpy, orbax, the OS): one line too.
USER_ERRORS = (GenretError, ValueError, OSError, KeyError, MemoryError, EOFError)


def command_module(name: str) -> str:
    """The module of `genret NAME`."""
    return "experiments.commands." + name.replace("-", "_")


def version() -> str:
    try:
        return importlib.metadata.version("genret")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (the usage itself is in --help)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _top_parser() -> argparse.ArgumentParser:
    epilog = "\n\n".join(
        f"{group}:\n" + "\n".join(f"  {n:<18} {h}" for n, h in cmds.items())
        for group, cmds in GROUPS.items()
    )
    p = _Parser(
        prog="genret",
        description="Generative retrieval with STATIC-constrained decoding, in JAX.",
        epilog=epilog + "\n\nRun `genret COMMAND --help` for a command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"genret {version()}")
    p.add_argument("command", choices=list(COMMANDS), metavar="COMMAND")
    return p


_XLA_ERRORS = ("JaxRuntimeError", "XlaRuntimeError")  # by name: this module imports no JAX


def outside_error(e: BaseException) -> BaseException | None:
    """What the outside world did, where `e` is not one of USER_ERRORS but comes from it: the
    system's OSError it was raised from, a symlink loop (pathlib's RuntimeError before Python
    3.13), or memory a device could not allocate (XLA's RESOURCE_EXHAUSTED) as a MemoryError.
    None for a bug."""
    if (error := os_error_in(e)) is not None:
        return error
    text = str(e).strip()
    if isinstance(e, RuntimeError) and (loop := re.fullmatch(r"Symlink loop from (.+)", text)):
        path = loop.group(1).strip("'\"")
        return OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
    if type(e).__name__ in _XLA_ERRORS and text.startswith("RESOURCE_EXHAUSTED"):
        size = re.search(r"allocat\w* (\d+) bytes", text)
        what = f"{int(size.group(1)) / 2**30:,.1f} GiB" if size else "a buffer"
        return MemoryError(f"the device could not allocate {what}")
    return None


def one_line(e: BaseException, paths: Sequence[tuple[str, Path]] = ()) -> str:
    """The message of an error, on one line; a bare KeyError or MemoryError says what it is, the
    system's OSError what it said and about which path: the argument, from `paths` (flag, value),
    that the path is or lies in."""
    if isinstance(e, MemoryError):
        return f"out of memory{': ' + str(e) if str(e) else ''}; try smaller sizes"
    if isinstance(e, OSError) and not isinstance(e, GenretError) and e.strerror:
        return _os_line(e, paths)
    msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
    text = " ".join(str(msg).split())
    if not isinstance(e, GenretError | ValueError | OSError):
        text = f"{type(e).__name__}: {text}"
    return text or type(e).__name__


def _os_line(e: OSError, paths: Sequence[tuple[str, Path]]) -> str:
    """PATH: what the system said, after the argument that names PATH or a folder above it."""
    names = [_decoded(f) for f in (e.filename, e.filename2) if f is not None]
    where = " -> ".join(names)
    line = f"{where}: {os_reason(e)}" if where else os_reason(e)
    if not names:
        return line
    target, best = os.path.abspath(names[0]), None
    for flag, value in paths:
        for root in {os.path.abspath(value), os.path.realpath(value)}:
            inside = target == root or target.startswith(root.rstrip(os.sep) + os.sep)
            if inside and (best is None or len(root) > best[0]):
                best = (len(root), flag, value, target == root)
    if best is None:
        return line
    _, flag, value, itself = best
    return f"{flag} {value}: {os_reason(e) if itself and len(names) == 1 else line}"


def _decoded(name: str | bytes | int) -> str:
    return os.fsdecode(name) if isinstance(name, str | bytes | os.PathLike) else str(name)


def _close_progress_bars() -> None:
    """Ends the progress bars a failed command left open (each on its own line, as when it
    finishes), so that the command's line starts a line of its own."""
    if (tqdm := sys.modules.get("tqdm")) is not None:
        for bar in list(getattr(tqdm.tqdm, "_instances", ())):
            bar.close()


def _path_arguments(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> list[tuple[str, Path]]:
    """(flag, path) of every path the command line holds."""
    out = []
    for action in parser._actions:
        value = getattr(args, action.dest, None) if action.option_strings else None
        for v in value if isinstance(value, list | tuple) else [value]:
            if isinstance(v, Path):
                out.append((max(action.option_strings, key=len), v))
    return out


def _remove_if_empty(root: Path) -> None:
    """A work directory this command created, holding no file: a failure leaves no trace."""
    if root.is_dir() and not any(p.is_file() or p.is_symlink() for p in root.rglob("*")):
        shutil.rmtree(root, ignore_errors=True)


def _command_parser(name: str):
    """The module of `genret NAME` and its argument parser."""
    module = importlib.import_module(command_module(name))
    parser = _Parser(
        prog=f"genret {name}",
        description=(module.__doc__ or COMMANDS[name]).strip(),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    module.add_arguments(parser)
    return module, parser


def parse(argv: list[str]) -> argparse.Namespace:
    """The arguments of a `genret` command line (without "genret"), as the command would take
    them; SystemExit on bad usage. Runs nothing."""
    if not argv or argv[0] not in COMMANDS:
        _top_parser().parse_args(argv[:1])
    return _command_parser(argv[0])[1].parse_args(argv[1:])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        _top_parser().parse_args(argv[:1])
    name, rest = argv[0], argv[1:]
    module, parser = _command_parser(name)
    args = parser.parse_args(rest)
    workdir = getattr(args, "workdir", None)
    new_workdir = workdir is not None and not workdir.exists()
    try:
        if getattr(args, "cpu_cores", None) is not None:
            from experiments.runtime.latency import cpu_latency_mode

            cpu_latency_mode(args.cpu_cores)
        result = module.run(args)
    except Terminated:
        print(_stopped_line(name), file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print(f"genret {name}: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    except Exception as e:
        if args.debug:
            raise
        culprit = e if isinstance(e, USER_ERRORS) else outside_error(e)
        _close_progress_bars()
        if culprit is None:  # a bug: still one line, with the way to the traceback
            print(
                f"genret {name}: internal error: {one_line(e)} (rerun with --debug for the "
                "traceback, and please report it)",
                file=sys.stderr,
            )
            return 1
        if new_workdir:
            _remove_if_empty(workdir)
        line = one_line(culprit, _path_arguments(parser, args))
        print(f"genret {name}: error: {line}", file=sys.stderr)
        return 1
    return int(result or 0)


class Terminated(KeyboardInterrupt):
    """SIGTERM, taken as a Ctrl-C (stop_on_sigterm)."""


SIGTERM_GRACE_S = 2.0  # how long a command blocked in a device call gets to take a SIGTERM
# orbax's threads that finish an asynchronous checkpoint save (rqvae.checkpoint.save)
_ORBAX_SAVE_THREADS = ("async_save", "save_finalize")
_taken = threading.Event()  # set when the main thread raised Terminated
_taking = threading.Lock()  # the main thread's handler or the watchdog's exit, never both


def _stopped_line(name: str) -> str:
    command = f"genret {name}".strip()
    return f"{command}: stopped by SIGTERM; rerun the same command to resume"


def _terminated(signum, frame):
    with _taking:
        _taken.set()
    raise Terminated


def stop_on_sigterm() -> None:
    """Makes SIGTERM (`kill`, a batch scheduler's preemption or time limit) stop the command as
    Ctrl-C does: a checkpoint save in flight finishes first (rqvae.checkpoint.deferred_interrupt
    holds it), stages running beside the pipeline stop with it, and the command says so in one
    line and exits with 143. Without this, SIGTERM ends the process at once, mid-save too. A
    SIGTERM ignored from the start stays ignored.

    Python runs the handler only between bytecodes, so a main thread blocked in a long device
    call (a jitted loop, a compilation) would take it only when the call returns: minutes, or
    never before the scheduler's SIGKILL. A watchdog thread, woken by the signal itself
    (signal.set_wakeup_fd), gives the main thread SIGTERM_GRACE_S seconds to take it; if it has
    not by then, and no checkpoint save is in flight, it writes the same line and exits with 143.
    """
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return
    signal.signal(signal.SIGTERM, _terminated)
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    if previous != -1:  # another's (an event loop's): keep it, and go without the watchdog
        signal.set_wakeup_fd(previous)
        os.close(read_fd)
        os.close(write_fd)
        return
    # A forked child (multiprocessing) would write its own signals into this process's pipe.
    os.register_at_fork(after_in_child=_no_wakeup_fd)
    threading.Thread(target=_watch_sigterm, args=(read_fd,), name="sigterm", daemon=True).start()


def _no_wakeup_fd() -> None:
    with contextlib.suppress(ValueError):
        signal.set_wakeup_fd(-1)


def _watch_sigterm(read_fd: int) -> None:
    """stop_on_sigterm's watchdog: the signal numbers Python received arrive as bytes on read_fd."""
    while True:
        if signal.SIGTERM not in os.read(read_fd, 64) or _taken.wait(SIGTERM_GRACE_S):
            continue
        while not _taken.wait(0.05):
            if _no_save_in_flight():
                _exit_stopped()


def _no_save_in_flight() -> bool:
    # A save in the main thread holds SIGTERM by putting its own handler in place of ours
    # (deferred_interrupt); orbax finishes an asynchronous one in threads of its own. The main
    # thread cannot begin a save once a SIGTERM is pending: it would take the SIGTERM at its first
    # Python call, before the save's.
    saving = any(t.name in _ORBAX_SAVE_THREADS for t in threading.enumerate())
    return signal.getsignal(signal.SIGTERM) is _terminated and not saving


def _exit_stopped() -> None:
    """The watchdog's end of a command: its one line, exit status 143, no interpreter shutdown
    (it would wait for the device call)."""
    name = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] in COMMANDS else ""
    with contextlib.suppress(Exception):  # what the command printed before, as console() does
        sys.stdout.flush()
        sys.stderr.flush()
    with _taking:
        if _taken.is_set():  # the main thread took it after all and prints the line itself
            return
        os.write(2, (_stopped_line(name) + "\n").encode())
        os._exit(143)


def _interrupt_main_thread(signum: int = signal.SIGINT) -> None:
    """`signum` to the main thread, as Ctrl-C sends SIGINT (a sleep or wait there ends at once)."""
    if callable(signal.getsignal(signum)):
        signal.pthread_kill(threading.main_thread().ident, signum)


def keep_interrupts() -> None:
    """Makes a Ctrl-C that lands inside a garbage-collector callback or a finalizer interrupt.

    Python cannot raise there: it prints "Exception ignored in: ..." with a KeyboardInterrupt
    traceback and goes on, so the Ctrl-C is lost. JAX runs such a callback at every collection
    (jax._src.lib._xla_gc_callback), so a Ctrl-C lands in one now and then. The hook hands the
    interrupt back to the main thread a few milliseconds later, from another thread, once the
    callback has returned (signalled at once, it would land in this hook, where Python cannot
    raise either); it is then raised, or held by a checkpoint save, as any other Ctrl-C (a SIGTERM
    taken as one, stop_on_sigterm, comes back as SIGTERM). Every other unraisable exception is
    reported as before.
    """
    previous = sys.unraisablehook

    def hook(unraisable) -> None:
        if issubclass(unraisable.exc_type, KeyboardInterrupt):
            signum = (
                signal.SIGTERM if issubclass(unraisable.exc_type, Terminated) else signal.SIGINT
            )
            if signum == signal.SIGTERM:
                _taken.clear()  # not taken after all: the watchdog waits for the one sent again
            threading.Timer(0.01, _interrupt_main_thread, (signum,)).start()
        else:
            previous(unraisable)

    sys.unraisablehook = hook


def console() -> None:
    """The `genret` executable: main(), and after a Ctrl-C or SIGTERM a prompt exit.

    XLA may still be compiling in a thread when Ctrl-C lands; a normal interpreter shutdown then
    destroys JAX's client under it and segfaults. Checkpoints are complete by now (saves hold the
    interrupt until committed), so exiting at once loses nothing. Compiled programs are cached
    on disk for later commands (experiments.runtime.xla_cache; GENRET_COMPILE_CACHE=off turns it
    off), and the heap asks for huge pages (experiments.runtime.hugepages; GENRET_HUGEPAGES=off
    turns it off).
    """
    from experiments.runtime import hugepages, xla_cache

    hugepages.restart_with_hugepages()
    xla_cache.enable()
    keep_interrupts()
    stop_on_sigterm()
    code = main()
    if code in (130, 143):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    console()

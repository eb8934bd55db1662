"""The `genret` command: `genret X` runs experiments/commands/X.py (dashes become underscores),
a module with add_arguments(parser) and run(args).

Every failure is one line on stderr and a non-zero exit: 1 for an error, 2 for bad usage, 130 for
Ctrl-C, 143 for SIGTERM (`kill`, a scheduler's preemption: stopped as by Ctrl-C); `--debug` shows
the traceback instead.
"""

import argparse
import importlib
import importlib.metadata
import os
import shutil
import signal
import sys
import threading
from pathlib import Path

from data.errors import GenretError

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


def one_line(e: BaseException) -> str:
    """The message of an error, on one line; a bare KeyError or MemoryError says what it is."""
    if isinstance(e, MemoryError):
        return f"out of memory{': ' + str(e) if str(e) else ''}; try smaller sizes"
    msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
    text = " ".join(str(msg).split())
    if not isinstance(e, GenretError | ValueError | OSError):
        text = f"{type(e).__name__}: {text}"
    return text or type(e).__name__


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
        result = module.run(args)
    except Terminated:
        print(
            f"genret {name}: stopped by SIGTERM; rerun the same command to resume", file=sys.stderr
        )
        return 143
    except KeyboardInterrupt:
        print(f"genret {name}: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    except USER_ERRORS as e:
        if args.debug:
            raise
        if new_workdir:
            _remove_if_empty(workdir)
        print(f"genret {name}: error: {one_line(e)}", file=sys.stderr)
        return 1
    except Exception as e:  # a bug: still one line, with the way to the traceback
        if args.debug:
            raise
        print(
            f"genret {name}: internal error: {one_line(e)} (rerun with --debug for the "
            "traceback, and please report it)",
            file=sys.stderr,
        )
        return 1
    return int(result or 0)


class Terminated(KeyboardInterrupt):
    """SIGTERM, taken as a Ctrl-C (stop_on_sigterm)."""


def _terminated(signum, frame):
    raise Terminated


def stop_on_sigterm() -> None:
    """Makes SIGTERM (`kill`, a batch scheduler's preemption or time limit) stop the command as
    Ctrl-C does: a checkpoint save in flight finishes first (rqvae.checkpoint.deferred_interrupt
    holds it), stages running beside the pipeline stop with it, and the command says so in one
    line and exits with 143. Without this, SIGTERM ends the process at once, mid-save too. A
    SIGTERM ignored from the start stays ignored."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminated)


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

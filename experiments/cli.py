"""The `genret` command: one subcommand per module with add_arguments(parser) and run(args)."""

import argparse
import importlib
import sys

# name -> (module, one-line help). Modules are imported only when their command runs.
COMMANDS = {
    "prepare": ("experiments.prepare", "read raw review/meta files and write the prepared dataset"),
    "data-stats": ("experiments.data_stats", "print dataset and cold-start statistics as JSON"),
    "train-tokenizer": (
        "experiments.train_tokenizer",
        "embed item texts, train RQ-VAE, write SIDs",
    ),
    "train-retriever": ("experiments.train_retriever", "train the decoder retriever on a split"),
    "eval-cold-start": ("experiments.eval_cold_start", "cold-start Recall@K, 3 methods"),
    "eval-warm": ("experiments.eval_warm", "leave-one-out Recall/NDCG@5/10 (the TIGER benchmark)"),
    "diagnose": (
        "experiments.diagnose",
        "validation-only tuning diagnostics: per-level accuracy, ensembles, prior correction",
    ),
    "pipeline": ("experiments.pipeline", "prepare, tokenizer, retrievers, evaluations and report"),
    "bench-constraints": ("experiments.bench_constraints", "latency/memory of constraint methods"),
    "bench-sweep": ("experiments.bench_sweep", "the paper's latency sweeps + plots"),
}

# Errors that mean bad input or a missing artifact: one line, no traceback.
USER_ERRORS = (ValueError, FileNotFoundError, NotADirectoryError, PermissionError, KeyError)


def _top_parser() -> argparse.ArgumentParser:
    epilog = "commands:\n" + "\n".join(f"  {n:<18} {h}" for n, (_, h) in COMMANDS.items())
    p = argparse.ArgumentParser(
        prog="genret",
        description="Generative retrieval with STATIC-constrained decoding, in JAX.",
        epilog=epilog + "\n\nRun `genret COMMAND --help` for a command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("command", choices=list(COMMANDS), metavar="COMMAND")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        _top_parser().parse_args(argv[:1])
    name, rest = argv[0], argv[1:]
    module_name, help_text = COMMANDS[name]
    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(
        prog=f"genret {name}",
        description=(module.__doc__ or help_text).strip(),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    module.add_arguments(parser)
    args = parser.parse_args(rest)
    try:
        result = module.run(args)
    except USER_ERRORS as e:
        if args.debug:
            raise
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"genret {name}: error: {msg}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"genret {name}: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())

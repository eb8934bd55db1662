"""Every example command line runs as written: the `genret` lines of each command's --help (its
module docstring and its flags' help) and of the code blocks of the README, docs/*.md and
docs/guide/*.md parse with their command's parser and name only flags it has (the documents'
placeholders D, W, P and N filled in); the benchmarks among them, which need no work
directory, run (at small sizes where the example's own take more than seconds)."""

import argparse
import json
import re
import shlex
from pathlib import Path

import pytest

from experiments import cli

ROOT = Path(__file__).resolve().parents[2]
GUIDES = sorted((ROOT / "docs" / "guide").glob("*.md"))
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *GUIDES]
# The placeholders of the documents' command lines: a dataset, a work directory, a fraction, a seed.
PLACEHOLDERS = {"D": "beauty", "W": "runs/w", "P": "0.02", "N": "1"}


def _cut(line: str) -> str:
    """A command line without the prose after it: "(Beauty: ~10 min ...)", ", then", `...`."""
    line = re.split(r"\s\(|,\s|`", line, maxsplit=1)[0]
    return line.strip().rstrip(".,")


def _help_lines(name: str) -> list[str]:
    """The example lines of `genret NAME --help`: those after "Example:" and those that begin a
    line, in the module docstring or a flag's help."""
    module, parser = cli._command_parser(name)
    texts = [module.__doc__ or ""] + [a.help for a in parser._actions if a.help]
    found = []
    for text in texts:
        for m in re.finditer(r"(?:^[ \t]*|Example:\s*)(genret [^\n]*)", text, re.M):
            found.append(_cut(m.group(1)))
    return list(dict.fromkeys(found))


def _guide_lines(path: Path) -> list[str]:
    """The `genret` lines of a guide's code blocks, continuations joined, environment variables
    set before the command dropped."""
    found = []
    for block in re.findall(r"```[^\n]*\n(.*?)```", path.read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"^\s*(?:[A-Z_][A-Z0-9_]*=\S*\s+)*", "", line)
            line = re.sub(r"^\.venv/bin/genret ", "genret ", line)
            if line.startswith("genret "):
                words = shlex.split(line, comments=True)
                words = [
                    re.sub(r"(?<=[= ])([DWPN])$", lambda m: PLACEHOLDERS[m[1]], " " + w)[1:]
                    for w in words
                ]
                found.append(shlex.join(words))
    return found


EXAMPLES = [(f"genret {n} --help", line) for n in cli.COMMANDS for line in _help_lines(n)] + [
    (str(p.relative_to(ROOT)), line) for p in DOCUMENTS for line in _guide_lines(p)
]


def test_the_examples_are_found():
    in_help = [line for where, line in EXAMPLES if where.startswith("genret ")]
    assert len(in_help) >= 8 and len(EXAMPLES) - len(in_help) >= 8, EXAMPLES


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings}


@pytest.mark.parametrize(("where", "line"), EXAMPLES, ids=[line for _, line in EXAMPLES])
def test_every_example_parses_and_names_only_flags_it_has(where, line, capsys):
    argv = shlex.split(line)[1:]
    try:
        cli.parse(argv)
    except SystemExit as e:
        pytest.fail(f"{where}: `{line}` does not parse: {capsys.readouterr().err.strip() or e}")
    # argparse takes an unambiguous prefix of a flag (--num-item for --num-items); an example
    # spells the flag out.
    flags = _flags(cli._command_parser(argv[0])[1])
    named = {a.split("=", 1)[0] for a in argv[1:] if a.startswith("--")}
    assert named <= flags, f"{where}: `{line}` names {sorted(named - flags)}, not flags of its own"


# The benchmarks that need no work directory run; their examples' sizes (1e6 items: seconds to a
# minute each) shrink to these, every other flag as written.
RUN = ("bench-constraints", "bench-labels", "bench-live", "bench-membership")
SMALL = {"--num-items": "2000", "--queries": "256", "--reps": "2", "--labels": "50,500"}


def _small(argv: list[str], out: Path) -> list[str]:
    """argv with the sizes of SMALL (added where the example leaves the default) and --out in
    `out`."""
    flags = _flags(cli._command_parser(argv[0])[1])
    argv = list(argv)
    for flag, value in {**SMALL, "--out": str(out)}.items():
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        elif flag in flags:
            argv += [flag, value]
    if "--devices" in argv:  # the one device this process has (the docs force 8 CPU devices)
        argv[argv.index("--devices") + 1] = "1"
    return argv


RUNS = [(w, line) for w, line in EXAMPLES if shlex.split(line)[1] in RUN]


def test_every_benchmark_has_an_example_that_runs():
    assert {shlex.split(line)[1] for _, line in RUNS} == set(RUN)


@pytest.mark.slow
@pytest.mark.parametrize(("where", "line"), RUNS, ids=[line for _, line in RUNS])
def test_benchmark_examples_run(where, line, tmp_path, capsys):
    argv = shlex.split(line)[1:]
    if argv[0] == "bench-labels":
        pytest.importorskip("transformers", reason="bench-labels needs the hf extra")
    argv = _small(argv, tmp_path / "out.json")
    code = cli.main(argv)
    assert code == 0, f"{where}: `genret {' '.join(argv)}`: {capsys.readouterr().err}"
    assert json.loads((tmp_path / "out.json").read_text())

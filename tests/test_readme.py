"""The front page and the documents: README's `genret` command lines parse with their commands'
parsers (`experiments.cli.parse`, which came with experiments/commands/ and runs nothing), README
stays a front page, every relative link of README.md, CHANGELOG.md and docs/**/*.md names a file
of the repository, and no document labels work by the development period it came from."""

import re
import shlex
from pathlib import Path

import pytest

from experiments import cli

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCUMENTS = [README, ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
PREFIXES = ("genret ", ".venv/bin/genret ")


def _command_lines(text: str) -> list[str]:
    """The `genret` lines of the ```bash blocks (continuations joined) and of the command table's
    cells; the install line is a shell chain, not one command, and is left out."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line.startswith(PREFIXES) and "pip install" not in line:
                lines.append(line)
    for row in (r for r in text.splitlines() if r.startswith("|")):
        lines += [c for c in re.findall(r"`([^`]+)`", row) if c.startswith(PREFIXES)]
    return lines


def _argv(line: str) -> list[str]:
    return shlex.split(line, comments=True)[1:]


def test_readme_commands_parse(capsys):
    lines = _command_lines(README.read_text())
    assert len(lines) > 20, "README lost its command lines"
    bad = []
    for line in lines:
        try:
            cli.parse(_argv(line))
        except SystemExit as e:
            bad.append(f"{line}\n    {capsys.readouterr().err.strip() or f'exit {e.code}'}")
    assert not bad, "README command lines that do not parse:\n" + "\n".join(bad)


def test_readme_is_a_front_page():
    n = len(README.read_text().splitlines())
    assert n <= 250, f"README.md has {n} lines; topics belong in docs/ (STYLE.md 7b)"


def _link_targets(text: str) -> list[str]:
    return re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text)


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_name_files_of_the_repository(doc):
    if not doc.exists():
        pytest.skip(f"{doc.name} is absent")
    missing = []
    for target in _link_targets(doc.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # http(s), mailto and anchors within the page
        path = (doc.parent / target.split("#", 1)[0]).resolve()
        if not path.exists() or ROOT not in path.parents:
            missing.append(target)
    assert not missing, f"{doc.relative_to(ROOT)} links to paths not in the repository: {missing}"


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_document_labels_work_by_its_development_period(doc):
    if not doc.exists():
        pytest.skip(f"{doc.name} is absent")
    text = doc.read_text()
    hits = []
    for m in re.finditer(r"(?i)sessions? [0-9]+", text):
        line = text.count("\n", 0, m.start()) + 1
        hits.append(f"{doc.relative_to(ROOT)}:{line}: {m.group()}")
    assert not hits, "name a result by command, machine and commit, not when:\n" + "\n".join(hits)

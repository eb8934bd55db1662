"""constraints.txt, the pinned install of the README and CI: it pins every dependency that
pyproject.toml names (core, dev, plot), each inside pyproject's range, and only once."""

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for n, line in enumerate((ROOT / "constraints.txt").read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^\s;]+)", line.strip())
        assert m, f"constraints.txt:{n}: not `name==version`: {line!r}"
        name = canonicalize_name(m.group(1))
        assert name not in pins, f"constraints.txt:{n}: {name} pinned twice"
        pins[name] = m.group(2)
    return pins


def test_every_dependency_is_pinned_inside_its_range():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    pins = _pins()
    assert "genret" not in pins  # the project itself is installed from the checkout
    for spec in [*project["dependencies"], *extras["dev"], *extras["plot"]]:
        req = Requirement(spec)
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not pinned in constraints.txt"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {req.name}=={pins[name]}, outside pyproject's {req.specifier}"
        )


def test_readme_install_and_ci_use_the_constraints():
    assert "-c constraints.txt" in (ROOT / ".ci" / "run").read_text()
    install = next(x for x in (ROOT / "README.md").read_text().splitlines() if "pip install" in x)
    assert "-c constraints.txt" in install, install

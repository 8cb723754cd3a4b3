"""What a new user meets of the package besides the scorers: the names ``import capeval`` shows, the README's account
of the evaluate modules and of a clone named ``capeval`` seen from its parent folder."""
from __future__ import annotations

import re
import subprocess
import sys
import types
from pathlib import Path

import capeval
from capeval.registry import FAMILIES
from fixtures.paths import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
NUMBERS = {"six": 6, "seven": 7, "eight": 8, "nine": 9}


def test_the_public_names_are_all_and_the_submodules() -> None:
    public = {name for name in dir(capeval) if not name.startswith("_")}
    submodules = {name for name in public if isinstance(getattr(capeval, name), types.ModuleType)}
    assert all(getattr(capeval, name).__name__ == f"capeval.{name}" for name in submodules)
    assert public - submodules == set(capeval.__all__) - {"__version__"}
    assert {"Any", "Dict", "List", "annotations", "FAMILIES", "MetricFamily"}.isdisjoint(dir(capeval))


def test_the_readme_counts_and_lists_every_evaluate_module() -> None:
    folders = sorted(path.name for path in (REPO_ROOT / "metrics").iterdir() if (path / f"{path.name}.py").is_file())
    assert folders == sorted(FAMILIES)
    counts = re.findall(r"\b(six|seven|eight|nine) (?:modules|families)\b", README)
    assert counts and {NUMBERS[word] for word in counts} == {len(folders)}
    listed = re.search(r"Each module folder \(([^)]*)\)", README).group(1)
    assert sorted(re.findall(r"`metrics/(\w+)`", listed)) == folders
    assert "`metrics/polos`" in README.split("## `evaluate`")[1].split("\n## ")[0]


def test_a_clone_named_capeval_seen_from_its_parent(tmp_path: Path) -> None:
    """From the folder holding a clone named ``capeval``, with no installed capeval ahead of it, ``import capeval``
    finds the clone's root, a folder without ``__init__.py``: a namespace package, on which ``from capeval import
    CLIPScore`` fails with the message the README's set-up quotes, naming the cure."""
    clone = tmp_path / "capeval"
    (clone / "capeval").mkdir(parents=True)
    (clone / "README.md").write_text("# capeval\n")
    run = subprocess.run([sys.executable, "-S", "-E", "-c", "from capeval import CLIPScore"], cwd=tmp_path,
                         capture_output=True, text=True)
    message = run.stderr.strip().splitlines()[-1].split(": ", 1)[1]
    assert message == "cannot import name 'CLIPScore' from 'capeval' (unknown location)"
    setup = " ".join(README.split("## Set-up")[1].split("\n### ")[0].split())
    assert f"`{message}`" in setup
    assert "clone named `capeval`" in setup and "clone under another name" in setup

"""``--help`` of every ``capeval`` subcommand, every conversion script and every speed script imports none of the heavy
libraries: the parsers are built from light modules, and the model and conversion code is imported once the arguments
are read."""
from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
from typing import List

import pytest

from capeval.cli import build_parser
from fixtures.paths import REPO_ROOT

HEAVY_MODULES = frozenset({"torch", "transformers", "safetensors", "huggingface_hub"})


def conversion_scripts() -> List[str]:
    """Every module of ``conversion/`` that runs as a script (``python -m conversion.<name>``)."""
    return sorted(f"conversion.{path.stem}" for path in (REPO_ROOT / "conversion").glob("*.py")
                  if 'if __name__ == "__main__":' in path.read_text(encoding="utf-8"))


def speed_scripts() -> List[str]:
    """Every script of ``speed/`` (``python speed/<name>.py``); its ``_*.py`` modules are parts, not scripts."""
    return sorted(path.name for path in (REPO_ROOT / "speed").glob("*.py")
                  if not path.name.startswith("_") and 'if __name__ == "__main__":' in path.read_text(encoding="utf-8"))


def capeval_subcommands() -> List[str]:
    """The subcommands of the ``capeval`` parser."""
    actions = [action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction)]
    return sorted(actions[0].choices)


def imported_by_help(command: List[str]) -> tuple[str, set[str]]:
    """The help text ``python -X importtime -m <command> --help`` (``python -X importtime <script> --help`` for a
    ``.py`` path) prints, and every module that the run imported."""
    run = command if command[0].endswith(".py") else ["-m", *command]
    completed = subprocess.run([sys.executable, "-X", "importtime", *run, "--help"], capture_output=True,
                               text=True, cwd=REPO_ROOT, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert completed.returncode == 0, completed.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in completed.stderr.splitlines() if line.startswith("import time:")}
    return completed.stdout, imported


def test_every_script_and_subcommand_is_covered() -> None:
    assert conversion_scripts() == ["conversion.convert_clip", "conversion.convert_polos", "conversion.convert_regions",
                                    "conversion.convert_scan", "conversion.convert_vilbert", "conversion.publish"]
    assert capeval_subcommands() == ["benchmark", "download", "regions", "score", "train"]
    assert speed_scripts() == ["bridge_speed.py", "polos_speed.py", "report.py", "startup.py", "throughput.py",
                               "tiger_speed.py", "time_baselines.py", "video_speed.py", "vilbertscore_speed.py"]


@pytest.mark.parametrize("script", conversion_scripts())
def test_conversion_script_help_imports_no_heavy_library(script: str) -> None:
    help_text, imported = imported_by_help([script])
    summary = importlib.import_module(script).__doc__.split("\n")[0]
    assert help_text.startswith("usage: ") and " ".join(summary.split()) in " ".join(help_text.split())
    assert not imported & HEAVY_MODULES


@pytest.mark.parametrize("subcommand", [None, *capeval_subcommands()])
def test_capeval_help_imports_no_heavy_library(subcommand: str | None) -> None:
    help_text, imported = imported_by_help(["capeval", *([subcommand] if subcommand else [])])
    assert help_text.startswith(f"usage: capeval {subcommand or ''}".rstrip())
    assert not imported & HEAVY_MODULES


@pytest.mark.parametrize("script", speed_scripts())
def test_speed_script_help_imports_no_heavy_library(script: str) -> None:
    help_text, imported = imported_by_help([str(REPO_ROOT / "speed" / script)])
    assert help_text.startswith(f"usage: {script}")
    assert not imported & HEAVY_MODULES

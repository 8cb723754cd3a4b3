"""Importing capeval and any one scorer class imports none of the libraries that only some calls need: transformers
(loaded with a model), torchvision (detection), PyAV (video files), NLTK (TIGEr's and BRIDGE's tokenisation), gradio
(the Spaces) and the region detectors (images without precomputed regions); each is imported by the call that needs
it, so a scorer's start-up costs little more than ``import torch``."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import List

import pytest

from capeval.registry import FAMILIES
from fixtures.paths import REPO_ROOT

CALL_ONLY_MODULES = ("transformers", "torchvision", "av", "nltk", "gradio", "capeval.models.regions.detectors",
                     "capeval.models.regions.modeling_bottom_up", "capeval.models.regions.modeling_x152_fpn")
"""Modules (with their submodules) that only some calls need."""


def modules_imported_by(statements: str) -> List[str]:
    """Every module in ``sys.modules`` after running ``statements`` in a fresh interpreter."""
    code = f"{statements}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT,
                               timeout=300, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert completed.returncode == 0, completed.stderr[-2000:]
    return json.loads(completed.stdout.splitlines()[-1])


def call_only_modules(modules: List[str]) -> List[str]:
    return [module for module in modules
            if any(module == name or module.startswith(f"{name}.") for name in CALL_ONLY_MODULES)]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_importing_a_scorer_class_imports_no_call_only_module(family: str) -> None:
    module, name = FAMILIES[family].scorer_path.split(":")
    modules = modules_imported_by(f"import capeval\ncapeval.{name}\nimport {module}")
    assert module in modules and "torch" in modules
    assert call_only_modules(modules) == []


def test_importing_capeval_imports_no_call_only_module() -> None:
    modules = modules_imported_by("import capeval\nfrom capeval import RegionFeatures, VideoFeatures")
    assert "capeval" in modules
    assert call_only_modules(modules) == []

"""Shared pytest fixtures: offline Hugging Face settings and tiny converted CLIP models."""
from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_EVALUATE_OFFLINE"] = "1"

TESTS_DIR = Path(__file__).resolve().parent
for import_root in (TESTS_DIR.parent, TESTS_DIR):  # the repo (capeval, conversion) and the test helpers
    if str(import_root) not in sys.path:
        sys.path.insert(0, str(import_root))

import pytest  # noqa: E402

from checkpoints import TinyClip, make_tiny_clip  # noqa: E402


@pytest.fixture(scope="session")
def tiny_openai_clip(tmp_path_factory: pytest.TempPathFactory) -> TinyClip:
    """Tiny clip-anytorch CLIP (QuickGELU): ``.model``, ``.checkpoint`` (state dict file), ``.hf_dir``."""
    return make_tiny_clip("openai", tmp_path_factory.mktemp("tiny_openai_clip"))


@pytest.fixture(scope="session")
def tiny_openclip(tmp_path_factory: pytest.TempPathFactory) -> TinyClip:
    """Tiny open_clip CLIP (exact GELU, 0.5 normalisation): ``.model``, ``.checkpoint``, ``.hf_dir``."""
    return make_tiny_clip("openclip", tmp_path_factory.mktemp("tiny_openclip"))

"""Fixtures of the TIGEr tests: the Punkt parameters the goldens of tests/data/tiger were made with, as NLTK's only
data."""
from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.tiger_checkpoints import load_goldens


@pytest.fixture(scope="module")
def nltk_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An NLTK data root holding the Punkt parameters the goldens were made with (a few abbreviations, nothing else)."""
    root = tmp_path_factory.mktemp("nltk_data")
    folder = root / "tokenizers" / "punkt_tab" / "english"
    folder.mkdir(parents=True)
    for name, text in load_goldens()["cases"]["punkt"].items():
        (folder / name).write_text(text, encoding="utf-8")
    return root


@pytest.fixture
def offline_punkt(nltk_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """NLTK reads its data from ``nltk_data`` alone for the test."""
    import nltk

    monkeypatch.setattr(nltk.data, "path", [str(nltk_data)])

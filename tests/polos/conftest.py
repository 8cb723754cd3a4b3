"""The tiny Polos original (rebuilt from seeds in the authors' layout) and its conversion, shared by the Polos tests."""
from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.polos_checkpoints import PolosOriginal, build_polos_original


@pytest.fixture(scope="session")
def polos_original(tmp_path_factory: pytest.TempPathFactory) -> PolosOriginal:
    """The tiny ``reprod.zip`` with its sentence encoder files and stand-in CLIP."""
    return build_polos_original(tmp_path_factory.mktemp("polos-original"))


@pytest.fixture(scope="session")
def polos_dir(polos_original: PolosOriginal, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny original converted by ``conversion/convert_polos.py``."""
    from conversion.convert_polos import main

    out = tmp_path_factory.mktemp("polos-converted") / "model"
    encoder = polos_original.encoder_dir
    main(["--checkpoint", str(polos_original.archive), "--encoder-config", str(encoder / "config.json"),
          "--vocab", str(encoder / "vocab.json"), "--merges", str(encoder / "merges.txt"), "--out", str(out)])
    return out

"""The tiny ViLBERT test data of tests/data/vilbert (NOTE.md there): goldens of the original code, the captions, the
region features, and the original-layout checkpoint unpacked and converted with ``conversion/convert_vilbert.py``."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Dict, List

import numpy as np

from capeval.models.regions import RegionFeatures
from conversion.convert_vilbert import convert

DATA = Path(__file__).resolve().parent / "data" / "vilbert"


def load_goldens() -> Dict[str, np.ndarray]:
    return dict(np.load(DATA / "goldens.npz"))


def load_items() -> List[dict]:
    return json.loads((DATA / "captions.json").read_text(encoding="utf-8"))


def load_regions() -> List[RegionFeatures]:
    stored = np.load(DATA / "regions.npz")
    return [RegionFeatures(stored["features"][i], stored["boxes"][i], tuple(stored["image_size"][i]))
            for i in range(len(stored["features"]))]


def unpack_checkpoint(folder: Path) -> Path:
    """The original-layout ``multi_task_model.bin`` written into ``folder``."""
    path = folder / "multi_task_model.bin"
    with gzip.open(DATA / "multi_task_model.bin.gz", "rb") as source, open(path, "wb") as target:
        shutil.copyfileobj(source, target)
    return path


def convert_checkpoint(checkpoint: Path, out: Path) -> Path:
    """``checkpoint`` converted into ``out`` with the test config and vocabulary."""
    convert(checkpoint, DATA / "config.json", DATA / "vocab.txt", out)
    return out

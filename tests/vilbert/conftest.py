"""Fixtures of the ViLBERT tests: the goldens of the original code and the captions of tests/data/vilbert."""
from __future__ import annotations

from typing import Dict, List

import numpy as np
import pytest

from fixtures.vilbert_checkpoints import load_goldens, load_items


@pytest.fixture(scope="module")
def goldens() -> Dict[str, np.ndarray]:
    return load_goldens()


@pytest.fixture(scope="module")
def items() -> List[dict]:
    return load_items()

"""Fixtures of the region detector tests: the shared Flickr8k images their goldens were computed on."""
from __future__ import annotations

from pathlib import Path
from typing import List

import pytest


@pytest.fixture(scope="module")
def golden_images(goldens: dict, capeval_test_data: Path) -> List[Path]:
    """The original Flickr8k images of the module's ``goldens`` (``goldens["names"]``), in their order."""
    folder = capeval_test_data / "flickr8k" / "images_original"
    return [folder / str(name) for name in goldens["names"]]

"""Polos reads images as its authors' code does (the wheel's dataset class, README and validation scripts):
``Image.open(path).convert("RGB")``, then the wheel's CLIP transform, where CLIP-S converts after the crop. On files of
every awkward kind the pixels equal that reading bit for bit, and per-item scores equal those of the same images
converted by the caller; the image rows are cached apart from CLIP-S's."""
from __future__ import annotations

from pathlib import Path
from typing import Dict

import clip.clip
import numpy as np
import pytest
import torch
from PIL import Image

import capeval
from capeval.models.clip.encoders import ClipEmbeddingEngine
from capeval.models.clip.loading import load_backbone
from capeval.models.polos.configuration import CLIP_FOLDER
from fixtures.awkward_images import AWKWARD_IMAGES, decoded_pixels
from fixtures.polos_checkpoints import ITEMS

CONVERSION_MATTERS = ["rgba-transparent.png", "palette-40x400.png", "palette-transparent.png", "la.png",
                      "grey-16bit.png", "bilevel.png", "cmyk.jpg", "animated.gif"]
"""The kinds whose pixels depend on converting before or after the resize (the others are RGB or grey)."""


@pytest.fixture(scope="module")
def scorer(polos_dir: Path) -> capeval.Polos:
    return capeval.Polos(model=polos_dir, device="cpu", num_workers=0)


@pytest.mark.parametrize("name", AWKWARD_IMAGES)
def test_pixels_are_the_wheels_reading(scorer: capeval.Polos, awkward_images: Dict[str, Path], name: str) -> None:
    path = awkward_images[name]
    expected = clip.clip._transform(224)(Image.open(path).convert("RGB"))  # the wheel's polos.clip._transform
    assert torch.equal(decoded_pixels(scorer.polos.backbone.image_transform, path), expected)


def test_scores_equal_those_of_images_converted_at_load(scorer: capeval.Polos,
                                                         awkward_images: Dict[str, Path]) -> None:
    files = [awkward_images[name] for name in CONVERSION_MATTERS]
    items = [ITEMS[index % len(ITEMS)] for index in range(len(files))]
    candidates, references = [candidate for candidate, _ in items], [refs for _, refs in items]
    converted = [Image.open(path).convert("RGB") for path in files]
    expected = scorer.score(converted, candidates, references)["polos_scores"]
    np.testing.assert_allclose(scorer.score(files, candidates, references)["polos_scores"], expected,
                               rtol=0, atol=1e-7)


def test_image_rows_are_cached_apart_from_clip_s(scorer: capeval.Polos, polos_dir: Path) -> None:
    clip_s = ClipEmbeddingEngine(load_backbone(polos_dir / CLIP_FOLDER, device="cpu"), num_workers=0)
    assert scorer.engine.cache_namespace("image") != clip_s.cache_namespace("image")
    assert scorer.engine.cache_namespace("text") == clip_s.cache_namespace("text")

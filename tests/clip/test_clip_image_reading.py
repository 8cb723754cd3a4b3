"""CLIP-S and PAC-S read images as ``clipscore.py`` and PAC-S's ``ImageDataset`` do: ``Image.open(path)`` as it is,
then the backbone's own preprocessing (``clip.load``'s, open_clip's for the ViT-L/14 backbone), which converts to RGB
after the resize and crop. Compared bit for bit with those packages' transforms on files of every awkward kind,
through the decoding workers' code."""
from __future__ import annotations

from pathlib import Path
from typing import Dict

import clip.clip
import pytest
import torch
from open_clip.transform import image_transform
from PIL import Image

from capeval.models.clip.encoders import ImageRows, backbone_cache_key
from capeval.models.clip.loading import load_backbone
from capeval.models.clip.preprocessing import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, ImageTransform
from fixtures.awkward_images import AWKWARD_IMAGES, decoded_pixels
from fixtures.clip_checkpoints import TinyClip

HALF = (0.5, 0.5, 0.5)


@pytest.mark.parametrize("name", AWKWARD_IMAGES)
def test_clip_s_reads_images_as_clip_load_preprocess(awkward_images: Dict[str, Path], name: str) -> None:
    path = awkward_images[name]
    expected = clip.clip._transform(224)(Image.open(path))
    assert torch.equal(decoded_pixels(ImageTransform(224, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD), path), expected)


@pytest.mark.parametrize("name", AWKWARD_IMAGES)
def test_pac_s_vit_l_reads_images_as_open_clip_preprocess(awkward_images: Dict[str, Path], name: str) -> None:
    path = awkward_images[name]
    expected = image_transform(224, is_train=False, mean=HALF, std=HALF)(Image.open(path))
    assert torch.equal(decoded_pixels(ImageTransform(224, HALF, HALF), path), expected)


def test_image_rows_keep_their_cache_key(tiny_openai_clip: TinyClip) -> None:
    """The conversion order joined the transform's settings without moving the rows CLIP-S and PAC-S cached before:
    their key is still the transform's ``repr``."""
    backbone = load_backbone(tiny_openai_clip.hf_dir, device="cpu")
    transform = backbone.image_transform
    assert not transform.rgb_at_load
    expected = backbone_cache_key(backbone, f"ImageTransform(size={transform.size}, mean={transform.mean}, "
                                            f"std={transform.std})")
    assert ImageRows(backbone, batch_size=2, num_workers=0).cache_key() == expected

"""BRIDGE's two image readers (its authors published no code; these are capeval's choices, stated in the card): the
BLIP captioner gets ``Image.open(path).convert("RGB")``, as BLIP's own code opens images (alpha dropped, not
composited: BLIP's processor then finds RGB and converts nothing), and the CLIP grid comes from CLIP-S and PAC-S's
reading (``tests/clip/test_clip_image_reading.py``)."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np
import pytest
import torch
from PIL import Image

from capeval.inputs import validate_image
from capeval.models.bridge.configuration import TemplateConfig
from capeval.models.bridge.encoders import TemplateRows, decode_template_row
from fixtures.awkward_images import AWKWARD_IMAGES


class RecordingCaptioner:
    """Stands in for BLIP: records the images it is given."""

    def __init__(self) -> None:
        self.images: List[Image.Image] = []

    def caption(self, images: Sequence[Image.Image]) -> List[str]:
        self.images.extend(images)
        return ["a caption"] * len(images)


@pytest.mark.parametrize("name", AWKWARD_IMAGES)
def test_captioner_gets_images_converted_at_load(awkward_images: Dict[str, Path], name: str) -> None:
    path = awkward_images[name]
    rows = TemplateRows(TemplateConfig(), torch.device("cpu"), batch_size=1)
    captioner = rows._captioner = RecordingCaptioner()
    [[row]] = list(rows.encode([[validate_image(path, 0)]]))
    assert decode_template_row(row) == "a caption"
    [image] = captioner.images
    assert image.mode == "RGB"
    np.testing.assert_array_equal(np.asarray(image), np.asarray(Image.open(path).convert("RGB")))

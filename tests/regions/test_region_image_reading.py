"""The detectors read images as the bottom-up pipeline's ``cv2.imread(path)`` does, with the OpenCV it was built
with (2.x: no EXIF orientation), bit for bit on files of every awkward kind; where vilbert-multi-task's
``np.array(Image.open(path))`` reads other pixels than that, it fails or reads something other than colours."""
from __future__ import annotations

from pathlib import Path
from typing import Dict

import cv2
import numpy as np
import pytest
from PIL import Image

from capeval.inputs import validate_image
from capeval.models.regions.preprocessing import decode_rgb
from fixtures.awkward_images import AWKWARD_IMAGES

VILBERT_READS = {"rgb.jpg": "same", "grey.png": "same", "wide-2000x30.png": "same", "exif-rotated.jpg": "same",
                 "rgba-transparent.png": "fails", "la.png": "fails", "cmyk.jpg": "fails",
                 "palette-40x400.png": "indices", "palette-transparent.png": "indices", "animated.gif": "indices",
                 "bilevel.png": "bits", "grey-16bit.png": "16-bit samples"}
"""What ``_image_transform`` of vilbert-multi-task's ``extract_features.py`` makes of each kind."""


CAFFE_MEANS = np.array([102.9801, 115.9465, 122.7717])


def vilbert_reading(path: Path) -> np.ndarray:
    """``extract_features.py``'s ``_image_transform`` up to its resize: the array of the image as PIL opens it, grey
    repeated to three channels, turned to BGR, the means subtracted (which fails unless there are three channels)."""
    image = np.array(Image.open(path)).astype(np.float32)
    if len(image.shape) < 3:
        image = np.repeat(image[:, :, np.newaxis], 3, axis=2)
    return image[:, :, ::-1] - CAFFE_MEANS


@pytest.mark.parametrize("name", AWKWARD_IMAGES)
def test_pixels_are_opencv_imread(awkward_images: Dict[str, Path], name: str) -> None:
    path = awkward_images[name]
    expected = cv2.imread(str(path), cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION)[:, :, ::-1]
    np.testing.assert_array_equal(decode_rgb(validate_image(path, 0)), expected)


def test_exif_orientation_is_not_applied(awkward_images: Dict[str, Path]) -> None:
    """OpenCV 3.1 and later turn the pixels as the EXIF orientation asks; the pipeline's OpenCV 2 did not."""
    path = awkward_images["exif-rotated.jpg"]
    assert decode_rgb(validate_image(path, 0)).shape == (140, 90, 3)
    assert cv2.imread(str(path)).shape == (90, 140, 3)


@pytest.mark.parametrize("name", AWKWARD_IMAGES)
def test_vilbert_multi_task_reading(awkward_images: Dict[str, Path], name: str) -> None:
    path = awkward_images[name]
    outcome = VILBERT_READS[name]
    if outcome == "fails":
        with pytest.raises(ValueError, match="broadcast"):
            vilbert_reading(path)
        return
    theirs = vilbert_reading(path)
    ours = decode_rgb(validate_image(path, 0))[:, :, ::-1].astype(np.float32) - CAFFE_MEANS
    if outcome == "same":
        np.testing.assert_array_equal(theirs, ours)
        return
    assert Image.open(path).mode == {"indices": "P", "bits": "1", "16-bit samples": "I;16"}[outcome]
    assert not np.array_equal(theirs, ours)

"""Image decoding and resizing for the region detectors, in the original Caffe way (the bottom-up detector's
``_get_image_blob`` and vilbert-multi-task's ``_image_transform``, which differ only in sizes and padding) or the
LXMERT port's way.

See :class:`capeval.models.regions.configuration.ExtractionSettings` for what each mode reproduces. The Caffe mode
re-implements OpenCV's ``cv2.resize(..., fx=scale, fy=scale, interpolation=cv2.INTER_LINEAR)`` on float32 pixels in
torch (no OpenCV dependency): output size ``round(side * scale)``, source coordinate ``(d + 0.5) / scale - 0.5``
computed from the requested scale (not the rounded size ratio) and rounded to float32 as OpenCV 2.4-4.x do
(OpenCV 5 keeps it in double: up to ~3e-5 px apart), clamped at the borders, a horizontal pass then a
vertical one with float32 weights. It differs from ``torch.nn.functional.interpolate(..., align_corners=False)``,
which takes its ratio from the output size: the two agree only when ``side * scale`` is an integer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

import numpy as np
import torch
from torch.nn import functional as F

from capeval.inputs import InputError, ImageItem
from capeval.models.regions.configuration import ResNetConfig

SIXTEEN_BIT_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N", "I"})


def decode_rgb(item: ImageItem) -> np.ndarray:
    """(H, W, 3) uint8 RGB pixels of an image, as ``generate_tsv.py``'s ``cv2.imread(path)`` reads them with the
    OpenCV of the bottom-up pipeline (its README's ``python-opencv``, the Caffe build's OpenCV 2 default): grey
    replicated to three channels, alpha dropped (not composited), palette and bilevel images expanded to their
    colours, 16-bit samples cut to their high byte (libpng's ``png_set_strip_16``), CMYK JPEG samples turned to RGB
    by OpenCV's integer formula (:func:`_opencv_cmyk_to_rgb`), EXIF orientation not applied (OpenCV 3.1 was the first
    to apply it), the first frame of an animated GIF (which OpenCV 2 could not read; later versions give that frame).

    vilbert-multi-task's ``_image_transform`` reads ``np.array(Image.open(path))`` instead: the same pixels for RGB
    and grey images; it fails on images with alpha and on CMYK (four or two channels where it subtracts three
    means), and takes palette indices, 0/1 bilevel values and 16-bit samples for 8-bit intensities. capeval reads
    those images as above for both detectors, as ``tests/regions/test_region_image_reading.py`` checks. The LXMERT port's
    ``img_tensorize`` calls ``cv2.imread`` too, under an OpenCV (4.x) that turns JPEGs by their EXIF orientation; the
    ``"lxmert"`` preprocessing reads them unturned, as above."""
    image = item.open()
    if image.mode in SIXTEEN_BIT_MODES:
        samples = np.asarray(image).astype(np.int64)
        grey = (np.clip(samples, 0, 65535) >> 8).astype(np.uint8)
        return np.repeat(grey[:, :, None], 3, axis=2)
    if image.mode == "F":
        raise InputError(f"images[{item.index}] ({item.label}) holds floating-point samples (PIL mode F); "
                         "convert it to 8-bit first")
    try:
        if image.mode == "CMYK" and image.format == "JPEG":
            return _opencv_cmyk_to_rgb(np.asarray(image))
        return np.asarray(image.convert("RGB"), dtype=np.uint8)
    except Exception as error:  # truncated data can surface only when pixels are read
        raise InputError(f"images[{item.index}] ({item.label}) could not be decoded: {error}") from None


def _opencv_cmyk_to_rgb(cmyk: np.ndarray) -> np.ndarray:
    """OpenCV's ``icvCvt_CMYK2BGR_8u_C4C3R`` on the samples libjpeg gives (Adobe-inverted: 255 minus the CMYK values
    PIL gives, as its ``CMYK;I`` mode undoes the inversion): each colour ``k - ((255 - c) * k >> 8)``, which differs
    from PIL's rounded ``(255 - C) * (255 - K) / 255`` by up to 1."""
    inverted = 255 - cmyk.astype(np.int32)
    key = inverted[:, :, 3:]
    return (key - (((255 - inverted[:, :, :3]) * key) >> 8)).astype(np.uint8)


def header_size(item: ImageItem) -> Tuple[int, int]:
    """(height, width) of an image as its header states it, read without decoding the pixels."""
    width, height = item.size()
    return height, width


@dataclass(frozen=True)
class ResizedImage:
    """Network input of one image, (3, height, width) float32, and how to take boxes back to the original pixels."""

    pixels: torch.Tensor
    original_size: Tuple[int, int]  # (width, height)
    box_divisor: float  # Caffe mode: original = resized / scale
    box_factors: Tuple[float, float]  # LXMERT mode: original = resized * (original / resized) per axis (x, y)
    content_size: Tuple[int, int]  # (height, width) of the resized image inside ``pixels``, before zero padding

    @property
    def size(self) -> Tuple[int, int]:
        """(height, width) of the network input, padding included."""
        return int(self.pixels.shape[1]), int(self.pixels.shape[2])

    def restore_boxes(self, boxes: torch.Tensor) -> torch.Tensor:
        """(R, 4) boxes in resized pixels -> original-image pixels, with the arithmetic of the chosen mode."""
        if self.box_divisor:
            return boxes / self.box_divisor
        factors = torch.tensor(self.box_factors, dtype=torch.float32, device=boxes.device)
        return boxes * factors.repeat(2)


def caffe_scale(height: int, width: int, config: ResNetConfig) -> float:
    """``fast_rcnn.test._get_image_blob``: shorter side to ``min_size_test`` unless the rounded longer side would
    exceed ``max_size_test``, then longer side to ``max_size_test``."""
    scale = float(config.min_size_test) / float(min(height, width))
    if np.round(scale * max(height, width)) > config.max_size_test:
        scale = float(config.max_size_test) / float(max(height, width))
    return scale


def _linear_taps(in_size: int, out_size: int, scale: float, device: torch.device
                 ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """OpenCV INTER_LINEAR source indices and weights along one axis for ``dst = src * scale``."""
    position = ((np.arange(out_size, dtype=np.float64) + 0.5) * (1.0 / scale) - 0.5).astype(np.float32)
    first = np.floor(position).astype(np.int64)
    fraction = position - first.astype(np.float32)
    before = first < 0
    fraction[before], first[before] = 0.0, 0
    after = first >= in_size - 1
    fraction[after], first[after] = 0.0, in_size - 1
    second = np.minimum(first + 1, in_size - 1)
    return (torch.from_numpy(first).to(device), torch.from_numpy(second).to(device),
            torch.from_numpy(np.float32(1.0) - fraction).to(device), torch.from_numpy(fraction).to(device))


def cv2_resized_size(height: int, width: int, scale: float) -> Tuple[int, int]:
    """(height, width) that ``cv2.resize(fx=scale, fy=scale)`` gives: each side ``round(side * scale)``."""
    return int(round(height * scale)), int(round(width * scale))


def cv2_linear_resize(image: torch.Tensor, scale: float) -> torch.Tensor:
    """(C, H, W) float32 resized by ``scale`` as ``cv2.resize(fx=scale, fy=scale, INTER_LINEAR)`` does."""
    _, height, width = image.shape
    out_height, out_width = cv2_resized_size(height, width, scale)
    x0, x1, wx0, wx1 = _linear_taps(width, out_width, scale, image.device)
    y0, y1, wy0, wy1 = _linear_taps(height, out_height, scale, image.device)
    rows = image[:, :, x0] * wx0 + image[:, :, x1] * wx1
    return rows[:, y0, :] * wy0[:, None] + rows[:, y1, :] * wy1[:, None]


def lxmert_size(height: int, width: int, config: ResNetConfig) -> Tuple[int, int]:
    """The port's ``ResizeShortestEdge``: shorter side to ``min_size_test``, capped so the longer side is at most
    ``max_size_test``, each side rounded half up."""
    size = config.min_size_test
    scale = size * 1.0 / min(height, width)
    if height < width:
        new_height, new_width = float(size), scale * width
    else:
        new_height, new_width = scale * height, float(size)
    if max(new_height, new_width) > config.max_size_test:
        cap = config.max_size_test * 1.0 / max(new_height, new_width)
        new_height, new_width = new_height * cap, new_width * cap
    return int(new_height + 0.5), int(new_width + 0.5)


def resized_size(height: int, width: int, config: ResNetConfig, mode: str) -> Tuple[int, int]:
    """(height, width) of a ``height`` x ``width`` image resized for the network in ``mode``, before padding: the
    ``content_size`` :func:`preprocess` gives, known without the pixels."""
    if mode == "caffe":
        return cv2_resized_size(height, width, caffe_scale(height, width, config))
    return lxmert_size(height, width, config)


def network_size(item: ImageItem, config: ResNetConfig, mode: str) -> Tuple[int, int]:
    """(height, width) of ``item`` resized for the network in ``mode`` (:func:`resized_size`, from its header), or
    :class:`InputError` naming the item when a side is or would become 0 pixels: both resizes cap the longer side at
    ``max_size_test`` and round the shorter one, which reaches 0 from an aspect ratio of ``2 * max_size_test`` to 1
    (the Caffe resize rounds half to even: a 1 x 2000 image for the bottom-up detector, 1 x 2666 for the FPN one). The
    reference pipelines crash there (``cv2.resize`` asserts a non-empty output size), and the detector's first
    convolution fails on an empty input. Large images are bounded before: :func:`capeval.inputs.validate_image`
    refuses images over ``PIL.Image.MAX_IMAGE_PIXELS``, and the resize caps the network input at
    ``max_size_test`` on its longer side."""
    height, width = header_size(item)
    resized = resized_size(height, width, config, mode) if height > 0 and width > 0 else (0, 0)
    if min(resized) > 0:
        return resized
    raise InputError(f"images[{item.index}] ({item.label}) is {width}x{height} pixels: resized for the detector "
                     f"(shorter side to {config.min_size_test}, longer side at most {config.max_size_test}) it would "
                     f"be {resized[1]}x{resized[0]}; the detector takes images whose longer side is less than "
                     f"{2 * config.max_size_test} times the shorter")


def pad_to_multiple(pixels: torch.Tensor, divisor: int) -> torch.Tensor:
    """(C, H, W) zero-padded at the bottom and right to sides that are multiples of ``divisor`` (0: unchanged), as
    maskrcnn-benchmark's ``to_image_list(size_divisible=divisor)`` does for one image."""
    if not divisor:
        return pixels
    height, width = pixels.shape[1:]
    return F.pad(pixels, (0, -width % divisor, 0, -height % divisor))


def preprocess(rgb: np.ndarray, config: ResNetConfig, mode: str, device: torch.device) -> ResizedImage:
    """One decoded (H, W, 3) uint8 RGB image -> network input in ``mode`` ("caffe" or "lxmert"), zero-padded to a
    multiple of ``config.size_divisibility``."""
    height, width = rgb.shape[:2]
    pixels = torch.from_numpy(np.array(rgb, copy=True)).to(device).permute(2, 0, 1)
    if mode == "caffe":  # numpy's float32 -= float64 means: subtract in float64, round once to float32
        mean = torch.tensor(config.pixel_mean, dtype=torch.float64, device=device).view(3, 1, 1)
        std = torch.tensor(config.pixel_std, dtype=torch.float64, device=device).view(3, 1, 1)
        bgr = ((pixels.flip(0).double() - mean) / std).float()
        scale = caffe_scale(height, width, config)
        resized = cv2_linear_resize(bgr, scale)
        return ResizedImage(pad_to_multiple(resized, config.size_divisibility), (width, height), scale, (1.0, 1.0),
                            (int(resized.shape[1]), int(resized.shape[2])))
    mean = torch.tensor(config.pixel_mean, dtype=torch.float32, device=device).view(3, 1, 1)
    std = torch.tensor(config.pixel_std, dtype=torch.float32, device=device).view(3, 1, 1)
    pixels = pixels.float()
    new_height, new_width = lxmert_size(height, width, config)
    resized = F.interpolate(pixels[None], (new_height, new_width), mode="bilinear", align_corners=False)[0]
    factors = torch.true_divide(torch.tensor([height, width]), torch.tensor([new_height, new_width]))
    return ResizedImage(pad_to_multiple((resized - mean) / std, config.size_divisibility), (width, height), 0.0,
                        (float(factors[1]), float(factors[0])), (new_height, new_width))

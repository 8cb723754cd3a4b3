"""Precomputed region features of one image, as a detector gives them and as region-based metrics consume them."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import numpy as np

from capeval.inputs import InputError, float32_rows


@dataclass(frozen=True, eq=False)
class RegionFeatures:
    """The regions of one image: ``features`` (N, D) float, ``boxes`` (N, 4) float as (x1, y1, x2, y2) in pixels of
    the original image or ``None``, ``image_size`` (width, height) or ``None``, and ``source``: what made them
    (detector, revision and extraction settings, :attr:`RegionExtractor.source
    <capeval.models.regions.extraction.RegionExtractor.source>`) or ``None`` when unknown; result signatures record
    it.

    TIGEr reads the features alone; ViLBERTScore also needs the boxes and the image size (its 5-d region locations).
    Use :meth:`validated` to check an instance against what a metric needs; it names the item on failure.
    """

    features: np.ndarray
    boxes: Optional[np.ndarray] = None
    image_size: Optional[Tuple[float, float]] = None
    source: Optional[str] = None

    def validated(self, index: int, *, feature_dim: Optional[int] = None, num_regions: Optional[int] = None,
                  needs_boxes: bool = False) -> "RegionFeatures":
        """A copy with float32 C-contiguous ``features`` and float64 ``boxes``, or an :class:`InputError` naming
        ``images[index]`` when a shape, dtype or value is unusable."""
        where = f"images[{index}]"
        features = _float_array(self.features, f"{where}.features")
        if features.ndim != 2 or features.shape[0] < 1:
            raise InputError(f"{where}.features must be a (regions, dim) array with at least one region, "
                             f"got shape {features.shape}")
        if feature_dim is not None and features.shape[1] != feature_dim:
            raise InputError(f"{where}.features has {features.shape[1]} columns; this model needs {feature_dim}")
        if num_regions is not None and features.shape[0] != num_regions:
            made_by = f" (made by {self.source})" if self.source is not None else ""
            raise InputError(f"{where}.features has {features.shape[0]} regions; this model needs {num_regions}"
                             f"{made_by}")
        boxes = None
        if self.boxes is not None:
            boxes = _float_array(self.boxes, f"{where}.boxes").astype(np.float64)
            if boxes.shape != (features.shape[0], 4):
                raise InputError(f"{where}.boxes must have shape ({features.shape[0]}, 4) to match the features, "
                                 f"got {boxes.shape}")
        size = None
        if self.image_size is not None:
            size = _image_size(self.image_size, where)
        if needs_boxes and (boxes is None or size is None):
            raise InputError(f"{where}: this metric needs the region boxes and the image size "
                             "(RegionFeatures(features, boxes, image_size))")
        if boxes is not None:
            if np.any(boxes[:, 2] < boxes[:, 0]) or np.any(boxes[:, 3] < boxes[:, 1]):
                row = int(np.flatnonzero((boxes[:, 2] < boxes[:, 0]) | (boxes[:, 3] < boxes[:, 1]))[0])
                raise InputError(f"{where}.boxes[{row}] is not (x1, y1, x2, y2) with x1 <= x2 and y1 <= y2")
            if size is not None:
                width, height = size
                outside = (boxes[:, 0] < 0) | (boxes[:, 1] < 0) | (boxes[:, 2] > width) | (boxes[:, 3] > height)
                if np.any(outside):
                    row = int(np.flatnonzero(outside)[0])
                    raise InputError(f"{where}.boxes[{row}] = {boxes[row].tolist()} lies outside the "
                                     f"{width:g}x{height:g} image")
        return RegionFeatures(float32_rows(features, f"{where}.features", "region"), boxes, size, self.source)

    def content_key(self) -> str:
        """A hash of the features, boxes and image size: equal regions share cache rows whatever object holds them
        (and whatever their ``source``)."""
        hasher = hashlib.blake2b(digest_size=16, person=b"capeval-regions")
        features = np.ascontiguousarray(self.features, dtype=np.float32)
        hasher.update(repr(features.shape).encode())
        hasher.update(features.tobytes())
        if self.boxes is not None:
            hasher.update(b"boxes")
            hasher.update(np.ascontiguousarray(self.boxes, dtype=np.float64).tobytes())
        if self.image_size is not None:
            hasher.update(repr(tuple(float(v) for v in self.image_size)).encode())
        return hasher.hexdigest()


@dataclass(frozen=True)
class KeyedRegions:
    """Validated region features with their :meth:`RegionFeatures.content_key` (the key of their cache rows)."""

    key: str
    regions: RegionFeatures


def keyed_regions(regions: RegionFeatures, index: int, **requirements: object) -> KeyedRegions:
    """``regions`` validated for ``images[index]`` (``requirements`` as :meth:`RegionFeatures.validated`), hashed."""
    valid = regions.validated(index, **requirements)  # type: ignore[arg-type]
    return KeyedRegions(valid.content_key(), valid)


class KeyedRegionsMemo:
    """:func:`keyed_regions` once per distinct input object: an image's regions are usually passed once per
    candidate, and each check and hash reads all of its features. It also gathers the :attr:`RegionFeatures.source`
    of every input since :meth:`reset`, for the result signature (:meth:`sources`)."""

    def __init__(self, **requirements: object) -> None:
        self.requirements = requirements
        self._known: Dict[int, Tuple[RegionFeatures, KeyedRegions]] = {}
        self._sources: Dict[Optional[str], None] = {}

    def __call__(self, regions: RegionFeatures, index: int) -> KeyedRegions:
        known = self._known.get(id(regions))
        if known is None or known[0] is not regions:
            known = (regions, keyed_regions(regions, index, **self.requirements))
            self._known[id(regions)] = known
            self._sources[regions.source] = None
        return known[1]

    def clear(self) -> None:
        """Forget the inputs seen so far (their objects may be freed and their ids reused)."""
        self._known.clear()

    def reset(self) -> None:
        """Forget the inputs and their sources: a new :meth:`Scorer.score <capeval.scorers.base.Scorer.score>` call."""
        self.clear()
        self._sources.clear()

    def sources(self) -> Optional[str]:
        """The sources of the regions since :meth:`reset`, sorted and joined by ``" + "`` (``unrecorded`` for
        regions without one), or ``None`` when none was recorded."""
        if all(source is None for source in self._sources):
            return None
        return " + ".join(sorted("unrecorded" if source is None else source for source in self._sources))


def _float_array(value: object, where: str) -> np.ndarray:
    try:
        array = np.asarray(value)
    except Exception as error:  # ragged nested lists and the like
        raise InputError(f"{where} is not an array: {error}") from None
    if array.dtype.kind not in "fiu" or array.dtype == np.bool_:
        raise InputError(f"{where} must hold real numbers, got dtype {array.dtype}")
    if not np.all(np.isfinite(array)):
        raise InputError(f"{where} holds NaN or infinite values")
    return array


def _image_size(value: object, where: str) -> Tuple[float, float]:
    try:
        width, height = (float(v) for v in value)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise InputError(f"{where}.image_size must be (width, height), got {value!r}") from None
    if not (np.isfinite(width) and np.isfinite(height) and width > 0 and height > 0):
        raise InputError(f"{where}.image_size must be positive, got {value!r}")
    return width, height

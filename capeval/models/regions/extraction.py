"""Region features at scale: batched, cached per image content, and written to a resumable ``.npz`` file.

:class:`RegionExtractor` turns images into :class:`RegionFeatures` (what TIGEr reads) or full :class:`Detections`.
Each distinct image (by content hash) runs through the detector once per model and settings: rows come from the
in-memory cache, then the on-disk cache (``cache_dir``), and only the rest are detected. Images are batched only
with images of the same network input size (and the same size before padding), so each result equals the image's
result alone.

The ``.npz`` file holds one key per image id; its value is a 0-d structured array with fields ``features`` (K, D)
float32, ``boxes`` (K, 4) float32 in original pixels, ``image_size`` (width, height), ``scores``, ``object_ids``,
``object_scores``, ``attribute_ids``, ``attribute_scores``, ``num_boxes`` (regions with a non-zero selection score,
the ``num_boxes`` of vilbert-multi-task's feature files) and ``content_hash``. Read it with
:func:`capeval.models.regions.files.read_region_features` (``numpy.load`` works too, without pickle).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import warnings
import zipfile
from collections import defaultdict
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Sequence, Tuple, Union

import numpy as np
import torch
from tqdm.auto import tqdm

from capeval.cache import DiskCache, MemoryCache
from capeval.inputs import ImageInput, ImageItem, InputError, validate_image
from capeval.models.regions.configuration import ExtractionSettings
from capeval.models.regions.features import RegionFeatures
from capeval.models.regions.modeling_bottom_up import BottomUpDetector
from capeval.models.regions.modeling_x152_fpn import X152FpnDetector
from capeval.models.regions.postprocessing import Detections, select_regions
from capeval.models.regions.preprocessing import ResizedImage, decode_rgb, preprocess

EXTRACTION_VERSION = "1"
"""Bumped whenever preprocessing, network or selection arithmetic changes, so old cache rows are not reused."""

_PER_REGION = ("scores", "object_ids", "object_scores", "attribute_ids", "attribute_scores")


def pack_detections(detections: Detections) -> np.ndarray:
    """One float32 row: K, D, width, height, boxes, features, then the per-region columns (ids < 2**24 are exact)."""
    count, dim = detections.features.shape
    parts = [np.array([count, dim, *detections.image_size], dtype=np.float32), detections.boxes.ravel(),
             detections.features.ravel()] + [getattr(detections, name).astype(np.float32) for name in _PER_REGION]
    return np.concatenate(parts)


def unpack_detections(row: np.ndarray) -> Detections:
    count, dim = int(row[0]), int(row[1])
    size = (float(row[2]), float(row[3]))
    boxes_end = 4 + 4 * count
    features_end = boxes_end + count * dim
    columns = [row[features_end + i * count: features_end + (i + 1) * count] for i in range(len(_PER_REGION))]
    values = {name: column.astype(np.int64) if name.endswith("_ids") else column.copy()
              for name, column in zip(_PER_REGION, columns)}
    return Detections(boxes=row[4:boxes_end].reshape(count, 4).copy(),
                      features=row[boxes_end:features_end].reshape(count, dim).copy(), image_size=size, **values)


class RegionExtractor:
    """Cached, batched region extraction with one detector and one :class:`ExtractionSettings`."""

    def __init__(self, detector: Union[BottomUpDetector, X152FpnDetector],
                 settings: ExtractionSettings = ExtractionSettings(), *,
                 batch_size: int = 4, cache_dir: Union[str, "os.PathLike[str]", None] = None,
                 memory_cache_bytes: int = 256 << 20, progress: bool = False) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be positive")
        self.detector = detector
        self.settings = settings
        self.batch_size = batch_size
        self.progress = progress
        self.device = next(detector.parameters()).device
        self._memory = MemoryCache(memory_cache_bytes)
        self._disk = DiskCache(cache_dir, self.cache_namespace()) if cache_dir is not None else None
        self.detected = 0
        """How many images this extractor has run through the detector (for tests and reports)."""

    def cache_namespace(self) -> str:
        """Model fingerprint, extraction version and settings: a changed model or setting never meets old rows."""
        text = f"{self.detector.fingerprint}|{EXTRACTION_VERSION}|{self.settings.signature()}"
        return "regions-" + hashlib.blake2b(text.encode(), digest_size=12).hexdigest()

    def __call__(self, images: Iterable[ImageInput]) -> List[RegionFeatures]:
        """Region features (features, boxes, image size) of each image, validated one by one."""
        return self.region_features([validate_image(image, index) for index, image in enumerate(images)])

    def region_features(self, items: Sequence[ImageItem]) -> List[RegionFeatures]:
        """The :class:`RegionFeatures` (features, boxes, image size) of each validated image."""
        return [RegionFeatures(d.features, d.boxes, d.image_size) for d in self.detections(items)]

    def detections(self, items: Sequence[ImageItem]) -> List[Detections]:
        """Kept regions of each item; duplicates (same content) share one detection."""
        rows = self._memory.get_many(item.key for item in items)
        missing = list({item.key: item for item in items if item.key not in rows}.values())
        if missing and self._disk is not None:
            found = self._disk.get_many([item.key for item in missing])
            rows.update(found)
            self._memory.put_many(found)
            missing = [item for item in missing if item.key not in found]
        for batch_rows in self._detect(missing):
            rows.update(batch_rows)
            self._memory.put_many(batch_rows)
            if self._disk is not None:
                self._disk.put_many(batch_rows)
        results = [unpack_detections(rows[item.key]) for item in items]
        short = [item.index for item, result in zip(items, results) if result.features.shape[0] < self.settings.min_boxes]
        if short:
            warnings.warn(f"{len(short)} image(s) gave fewer than {self.settings.min_boxes} regions (the detector "
                          f"proposed fewer, e.g. a tiny image); their results hold every region kept: images {short[:10]}")
        return results

    def _detect(self, items: Sequence[ImageItem]) -> Iterator[Dict[str, np.ndarray]]:
        """Detect ``items`` in batches of equal input size; yields packed rows keyed by content hash per batch."""
        if not items:
            return
        config, mode = self.detector.config, self.settings.preprocessing
        pending: Dict[Tuple[Tuple[int, int], Tuple[int, int]], List[Tuple[ImageItem, ResizedImage]]] = \
            defaultdict(list)
        bar = tqdm(total=len(items), unit="image", desc="regions", disable=not self.progress)
        try:
            for item in items:
                image = preprocess(decode_rgb(item), config, mode, self.device)
                key = (image.size, image.content_size)
                group = pending[key]
                group.append((item, image))
                if len(group) == self.batch_size:
                    yield self._run(pending.pop(key))
                    bar.update(self.batch_size)
            for group in pending.values():
                yield self._run(group)
                bar.update(len(group))
        finally:
            bar.close()

    def _run(self, group: List[Tuple[ImageItem, ResizedImage]]) -> Dict[str, np.ndarray]:
        height, width = group[0][1].content_size
        pixels = torch.stack([image.pixels for _, image in group])
        regions = self.detector(pixels, height, width)
        self.detected += len(group)
        return {item.key: pack_detections(select_regions(result, image, self.detector.config, self.settings))
                for (item, image), result in zip(group, regions)}


def _record(detections: Detections, content_hash: str) -> np.ndarray:
    count, dim = detections.features.shape
    dtype = np.dtype([("features", np.float32, (count, dim)), ("boxes", np.float32, (count, 4)),
                      ("image_size", np.float64, (2,)), ("scores", np.float32, (count,)),
                      ("object_ids", np.int64, (count,)), ("object_scores", np.float32, (count,)),
                      ("attribute_ids", np.int64, (count,)), ("attribute_scores", np.float32, (count,)),
                      ("num_boxes", np.int64), ("content_hash", "S32")])
    record = np.zeros((), dtype=dtype)
    for name in dtype.names[:-2]:
        record[name] = getattr(detections, name)
    record["num_boxes"] = int(np.count_nonzero(detections.scores > 0))
    record["content_hash"] = content_hash.encode()
    return record


def _stored_ids(path: Path) -> set:
    if not path.exists():
        return set()
    try:
        with zipfile.ZipFile(path) as archive:
            return {name[:-4] for name in archive.namelist() if name.endswith(".npy")}
    except zipfile.BadZipFile:
        raise InputError(f"{path} exists but is not a readable .npz file; move it away or choose another --out") from None


def extract_to_file(extractor: RegionExtractor, images: Dict[str, Path], out: Union[str, Path],
                    *, chunk_size: int = 64) -> int:
    """Write the regions of ``images`` (``{image id: path}``) to ``out``; returns how many images were detected.

    Resumable: ids already in ``out`` are skipped, and each finished image is first saved as
    ``<out>.parts/<id>.npy`` (atomic rename), so an interrupted run loses at most the chunk in flight. At the end
    the parts and the previous file are packed into a new ``out`` that replaces the old one atomically.
    """
    out = Path(out)
    parts = out.with_name(out.name + ".parts")
    parts.mkdir(parents=True, exist_ok=True)
    done = _stored_ids(out) | {p.stem for p in parts.glob("*.npy")}
    todo = [(image_id, path) for image_id, path in images.items() if image_id not in done]
    detected_before = extractor.detected
    bar = tqdm(total=len(images), initial=len(images) - len(todo), unit="image", desc="regions")
    for start in range(0, len(todo), chunk_size):
        chunk = todo[start:start + chunk_size]
        items = []
        for image_id, path in chunk:
            item = validate_image(path, start + len(items))
            items.append(ImageItem(item.index, item.key, item.data, f"{image_id} ({path})"))
        for (image_id, _), item, detections in zip(chunk, items, extractor.detections(items)):
            temporary = parts / f"{image_id}.npy.tmp"
            with open(temporary, "wb") as handle:
                np.lib.format.write_array(handle, _record(detections, item.key), allow_pickle=False)
            os.replace(temporary, parts / f"{image_id}.npy")
        bar.update(len(chunk))
    bar.close()
    stored = _stored_ids(out)
    packed = out.with_name(out.name + ".tmp")
    with zipfile.ZipFile(packed, "w", allowZip64=True) as archive:
        if out.exists():
            with zipfile.ZipFile(out) as previous:
                for name in previous.namelist():
                    archive.writestr(previous.getinfo(name), previous.read(name))
        for part in sorted(parts.glob("*.npy")):
            if part.stem not in stored:
                archive.write(part, part.name)
    os.replace(packed, out)
    shutil.rmtree(parts)
    return extractor.detected - detected_before

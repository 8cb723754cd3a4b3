"""Region features at scale: detections as rows of the shared :class:`~capeval.engine.EmbeddingEngine`, and a
resumable ``.npz`` file of them.

:class:`RegionExtractor` turns images into :class:`RegionFeatures` (what TIGEr and ViLBERTScore read) or full
:class:`Detections`. Its :class:`DetectionRows` producer makes each distinct image (by content hash) one engine row
per detector and settings, so the engine serves it from memory, then from the on-disk cache (``cache_dir``), and
runs only the rest through the detector, in batches dealt out over the processes of ``accelerate launch``. Images
are batched only with images of the same size after resizing (hence the same network input size), so each result
equals the image's result alone. A row is the detections packed into float32 (:func:`pack_detections`); its on-disk
namespace is ``regions-`` and a digest of the detector fingerprint, :data:`EXTRACTION_VERSION` and the settings, the
namespace and layout of the caches written before detections went through the engine, which stay valid.

The ``.npz`` file holds one key per image id; its value is a 0-d structured array with fields ``features`` (K, D)
float32, ``boxes`` (K, 4) float32 in original pixels, ``image_size`` (width, height), ``scores``, ``object_ids``,
``object_scores``, ``attribute_ids``, ``attribute_scores``, ``num_boxes`` (regions with a non-zero selection score,
the ``num_boxes`` of vilbert-multi-task's feature files), ``content_hash`` and ``source`` (the extractor's
:attr:`RegionExtractor.source`: detector, revision and extraction settings, which result signatures record). Read it
with :func:`capeval.models.regions.files.read_region_features` (``numpy.load`` works too, without pickle).
"""
from __future__ import annotations

import os
import shutil
import time
import warnings
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, Iterable, Iterator, List, Mapping, Sequence, Tuple, Union

import numpy as np
import torch
from accelerate.utils import broadcast_object_list, gather_object
from tqdm.auto import tqdm

from capeval.engine import Batch, EmbeddingEngine, RowProducer
from capeval.inputs import ImageInput, ImageItem, InputError, validate_image
from capeval.models.regions.configuration import SAVE_SECONDS, ExtractionSettings
from capeval.models.regions.features import RegionFeatures
from capeval.models.regions.postprocessing import Detections, select_regions
from capeval.models.regions.preprocessing import ResizedImage, decode_rgb, network_size, preprocess

if TYPE_CHECKING:  # the detectors' modules are imported by their loading (DetectorSpec.model_class), never here:
    # scoring precomputed regions imports no detector code
    from capeval.models.regions.modeling_bottom_up import BottomUpDetector
    from capeval.models.regions.modeling_x152_fpn import X152FpnDetector

EXTRACTION_VERSION = "3"
"""Bumped whenever preprocessing, network or selection arithmetic changes, so old cache rows are not reused (2: the
bottom-up RPN keeps at least ``min_boxes`` proposals, see :attr:`ExtractionSettings.min_proposals`; 3: 16-bit and
CMYK JPEG images read as OpenCV reads them, see :func:`~capeval.models.regions.preprocessing.decode_rgb`)."""

_PER_REGION = ("scores", "object_ids", "object_scores", "attribute_ids", "attribute_scores")

Detector = Union["BottomUpDetector", "X152FpnDetector"]


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


class DetectionRows(RowProducer[ImageItem]):
    """Kept regions of validated images, keyed by content hash: one packed row (:func:`pack_detections`) each, of a
    length that depends on the number of regions (read with :meth:`EmbeddingEngine.row_list`)."""

    kind = "regions"

    def __init__(self, detector: Detector, settings: ExtractionSettings, batch_size: int) -> None:
        self.detector, self.settings, self.batch_size = detector, settings, batch_size
        self.device = next(detector.parameters()).device

    def key(self, item: ImageItem) -> str:
        return item.key

    def cache_key(self) -> str:
        return f"{self.detector.fingerprint}|{EXTRACTION_VERSION}|{self.settings.signature()}"

    def plan(self, items: Mapping[str, ImageItem]) -> List[Batch]:
        """Images in order, grouped by their resized (height, width) read from the headers: a group is a batch once
        it holds ``batch_size`` images, and the groups left at the end are batches. Payload: (item, resized size).
        An image of a shape the detector cannot take is refused here, before any image is detected
        (:func:`~capeval.models.regions.preprocessing.network_size`)."""
        pending: Dict[Tuple[int, int], Batch] = {}
        batches: List[Batch] = []
        for key, item in items.items():
            size = network_size(item, self.detector.config, self.settings.preprocessing)
            group = pending.setdefault(size, [])
            group.append((key, (item, size)))
            if len(group) == self.batch_size:
                batches.append(pending.pop(size))
        return batches + list(pending.values())

    def encode(self, batches: List[List[Tuple[ImageItem, Tuple[int, int]]]]) -> Iterator[List[np.ndarray]]:
        from capeval.models.regions.modeling_bottom_up import BottomUpDetector

        config = self.detector.config
        # only the bottom-up detector fills up its proposals (the rule of the bottom-up selection)
        fills_proposals = isinstance(self.detector, BottomUpDetector)
        options = {"min_proposals": self.settings.min_proposals} if fills_proposals else {}
        for batch in batches:
            images = [self._preprocessed(item, size) for item, size in batch]
            height, width = images[0].content_size
            regions = self.detector(torch.stack([image.pixels for image in images]), height, width, **options)
            yield [pack_detections(select_regions(result, image, config, self.settings))
                   for image, result in zip(images, regions)]

    def _preprocessed(self, item: ImageItem, size: Tuple[int, int]) -> ResizedImage:
        image = preprocess(decode_rgb(item), self.detector.config, self.settings.preprocessing, self.device)
        if image.content_size != size:  # batches were planned from header sizes: batch-mates must share this one
            raise InputError(f"images[{item.index}] ({item.label}) decodes to another size than its header states")
        return image


class RegionExtractor:
    """Region extraction with one detector and one :class:`ExtractionSettings`, through its own engine
    (``self.engine``: memory cache of ``memory_cache_bytes``, optional on-disk cache in ``cache_dir``, batches of up
    to ``batch_size`` images, sharded under ``accelerate launch``)."""

    def __init__(self, detector: Detector, settings: ExtractionSettings = ExtractionSettings(), *,
                 batch_size: int = 4, cache_dir: Union[str, "os.PathLike[str]", None] = None,
                 memory_cache_bytes: int = 256 << 20, progress: bool = False) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be positive")
        self.detector = detector
        self.settings = settings
        self.batch_size = batch_size
        producer = DetectionRows(detector, settings, batch_size)
        self.device = producer.device
        self.engine = EmbeddingEngine([producer], cache_dir=cache_dir, memory_cache_bytes=memory_cache_bytes,
                                      progress=progress)

    @property
    def detected(self) -> int:
        """How many images this extractor has run through the detector (in this process; for tests and reports)."""
        return self.engine.encoded[DetectionRows.kind]

    def cache_namespace(self) -> str:
        """Model fingerprint, extraction version and settings: a changed model or setting never meets old rows."""
        return self.engine.cache_namespace(DetectionRows.kind)

    @property
    def source(self) -> str:
        """What made these regions, as region files and result signatures record it: the detector's name (hub id
        or folder) at its revision (``local-<content hash>`` for a folder), and the settings
        (``capeval/bottom-up-frcnn-r101-vg@v1.0(class_nms_threshold=0.3,...)``)."""
        detector = self.detector
        revision = detector.revision if detector.revision is not None else f"local-{detector.fingerprint[:12]}"
        return f"{detector.name}@{revision}({self.settings.signature()})"

    def __call__(self, images: Iterable[ImageInput]) -> List[RegionFeatures]:
        """Region features (features, boxes, image size) of each image, validated one by one."""
        return self.region_features([validate_image(image, index) for index, image in enumerate(images)])

    def region_features(self, items: Sequence[ImageItem]) -> List[RegionFeatures]:
        """The :class:`RegionFeatures` (features, boxes, image size) of each validated image."""
        source = self.source
        return [RegionFeatures(d.features, d.boxes, d.image_size, source) for d in self.detections(items)]

    def detections(self, items: Sequence[ImageItem]) -> List[Detections]:
        """Kept regions of each item; duplicates (same content) share one detection."""
        results = [unpack_detections(row) for row in self.engine.row_list(DetectionRows.kind, items)]
        short = [item.index for item, result in zip(items, results) if result.features.shape[0] < self.settings.min_boxes]
        if short:
            warnings.warn(f"{len(short)} image(s) gave fewer than {self.settings.min_boxes} regions (the detector "
                          f"proposed fewer, e.g. a tiny image); their results hold every region kept: images {short[:10]}")
        return results


def _record(detections: Detections, content_hash: str, source: str) -> np.ndarray:
    count, dim = detections.features.shape
    encoded_source = source.encode()
    dtype = np.dtype([("features", np.float32, (count, dim)), ("boxes", np.float32, (count, 4)),
                      ("image_size", np.float64, (2,)), ("scores", np.float32, (count,)),
                      ("object_ids", np.int64, (count,)), ("object_scores", np.float32, (count,)),
                      ("attribute_ids", np.int64, (count,)), ("attribute_scores", np.float32, (count,)),
                      ("num_boxes", np.int64), ("content_hash", "S32"), ("source", f"S{len(encoded_source)}")])
    record = np.zeros((), dtype=dtype)
    for name in dtype.names[:-3]:
        record[name] = getattr(detections, name)
    record["num_boxes"] = int(np.count_nonzero(detections.scores > 0))
    record["content_hash"] = content_hash.encode()
    record["source"] = encoded_source
    return record


def _stored_ids(path: Path) -> set:
    if not path.exists():
        return set()
    try:
        with zipfile.ZipFile(path) as archive:
            return {name[:-4] for name in archive.namelist() if name.endswith(".npy")}
    except zipfile.BadZipFile:
        raise InputError(f"{path} exists but is not a readable .npz file; move it away or choose another --out") from None


def next_chunk_size(seconds_per_image: float, chunk_size: int, save_seconds: float) -> int:
    """Images in the next chunk of :func:`extract_to_file`: as many as the last chunk's pace detects in
    ``save_seconds``, at least 1 and at most ``chunk_size``."""
    if seconds_per_image <= 0:
        return chunk_size
    return max(1, min(chunk_size, int(save_seconds / seconds_per_image)))


def extract_to_file(extractor: RegionExtractor, images: Dict[str, Path], out: Union[str, Path],
                    *, chunk_size: int = 64, save_seconds: float = SAVE_SECONDS,
                    clock: Callable[[], float] = time.monotonic) -> int:
    """Write the regions of ``images`` (``{image id: path}``) to ``out``; returns how many images were detected.

    Resumable: ids already in ``out`` are skipped, and the images are detected in chunks, each finished chunk saved
    as ``<out>.parts/<id>.npy`` files (atomic renames), so an interrupted run loses at most the chunk in flight. A
    chunk holds ``chunk_size`` images, or fewer when the detector is slow: the first holds one batch, and each next
    one as many images as the previous chunk's pace (on ``clock``) detects in ``save_seconds`` (at least one image),
    so progress is saved every ``chunk_size`` images or about every ``save_seconds``, whichever comes first (a
    single image slower than that is saved when it is done). At the end the parts and the previous file are packed
    into a new ``out`` that replaces the old one atomically. Under ``accelerate launch`` (``out`` on a file system
    every process sees) the processes share the detection work, take the main process's chunk sizes, and the main
    process writes; the count returned is that of all processes.
    """
    out = Path(out)
    state = extractor.engine.state
    parts = out.with_name(out.name + ".parts")
    parts.mkdir(parents=True, exist_ok=True)
    done = _stored_ids(out) | {p.stem for p in parts.glob("*.npy")}
    todo = [(image_id, path) for image_id, path in images.items() if image_id not in done]
    state.wait_for_everyone()  # every process has listed the same ids as done before the main process writes
    detected_before = extractor.detected
    source = extractor.source
    bar = tqdm(total=len(images), initial=len(images) - len(todo), unit="image", desc="regions",
               disable=not state.is_main_process)
    start, size = 0, min(chunk_size, extractor.batch_size)
    while start < len(todo):
        chunk = todo[start:start + size]
        began = clock()
        items = []
        for image_id, path in chunk:
            item = validate_image(path, start + len(items))
            items.append(ImageItem(item.index, item.key, item.data, f"{image_id} ({path})"))
        detections = extractor.detections(items)
        if state.is_main_process:
            for (image_id, _), item, detection in zip(chunk, items, detections):
                temporary = parts / f"{image_id}.npy.tmp"
                with open(temporary, "wb") as handle:
                    np.lib.format.write_array(handle, _record(detection, item.key, source), allow_pickle=False)
                os.replace(temporary, parts / f"{image_id}.npy")
        bar.update(len(chunk))
        start += len(chunk)
        size = broadcast_object_list([next_chunk_size((clock() - began) / len(chunk), chunk_size, save_seconds)])[0]
    bar.close()
    if state.is_main_process:
        _pack(out, parts)
    state.wait_for_everyone()
    return sum(gather_object([extractor.detected - detected_before]))


def _pack(out: Path, parts: Path) -> None:
    """Replace ``out`` by a file holding its entries and those of the ``parts`` folder, which is then removed."""
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

"""Precomputed region-feature files, keyed by image id, and :class:`RegionLookup`, which finds an image's regions in
one by the image's name or path (the CLI and the benchmarks name images by path).

Two layouts are read:

* ``.npz``: one entry per image id. The value is either a ``(regions, dim)`` float array of features, or a 0-d
  structured array with a ``features`` field and optional ``boxes``, ``image_size`` and ``source`` fields (capeval's
  extraction files, :mod:`capeval.models.regions.extraction`; ``source`` says what made the regions and becomes
  :attr:`RegionFeatures.source`). Files are opened with ``allow_pickle=False``.
* ``.tsv``: the layout of bottom-up-attention's ``generate_tsv.py``. Each tab-separated line is
  ``image_id, image_w, image_h, num_boxes, boxes, features``; ``boxes`` and ``features`` are base64-encoded float32
  arrays of ``num_boxes x 4`` and ``num_boxes x dim`` values.
"""
from __future__ import annotations

import base64
import binascii
import csv
import sys
import zipfile
from pathlib import Path
from typing import Dict, Mapping, Union

import numpy as np

from capeval.inputs import InputError
from capeval.models.regions.features import RegionFeatures

TSV_FIELDS = ("image_id", "image_w", "image_h", "num_boxes", "boxes", "features")


def read_region_features(path: Union[str, Path]) -> Dict[str, RegionFeatures]:
    """Image id -> :class:`RegionFeatures` of a ``.npz`` or bottom-up ``.tsv`` file (see the module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"region feature file {str(path)!r} does not exist")
    if path.suffix == ".npz":
        return _read_npz(path)
    if path.suffix in (".tsv", ".txt"):
        return _read_tsv(path)
    raise InputError(f"region feature file {str(path)!r}: expected a .npz or a bottom-up .tsv file")


def _read_npz(path: Path) -> Dict[str, RegionFeatures]:
    if not zipfile.is_zipfile(path):  # else numpy reads it as a pickle and says "pickled data"
        head = path.read_bytes()[:8]
        found = "is empty" if not head else f"starts with {head!r}"
        raise InputError(f"region feature file {str(path)!r} is not a .npz archive (a zip of .npy arrays): it {found}")
    regions: Dict[str, RegionFeatures] = {}
    try:
        with np.load(path, allow_pickle=False) as archive:
            for image_id in archive.files:
                value = archive[image_id]
                if value.dtype.names is None:
                    regions[image_id] = RegionFeatures(features=value)
                elif "features" in value.dtype.names:
                    fields = value.dtype.names
                    regions[image_id] = RegionFeatures(
                        features=value["features"][()],
                        boxes=value["boxes"][()] if "boxes" in fields else None,
                        image_size=tuple(value["image_size"][()]) if "image_size" in fields else None,
                        source=_text(value["source"][()], f"{path}[{image_id!r}].source") if "source" in fields
                        else None)
                else:
                    raise InputError(f"{path}[{image_id!r}] is a structured array without a 'features' field")
    except InputError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as error:  # object arrays, truncated or damaged members
        raise InputError(f"region feature file {str(path)!r} is not a readable .npz without pickles: {error}") from None
    return regions


def _text(value: object, where: str) -> str:
    """A string field of a structured record: text, or bytes (as capeval stores it) decoded as UTF-8."""
    if isinstance(value, str):
        return value
    if not isinstance(value, bytes):
        raise InputError(f"{where} must be text, got {type(value).__name__}")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError(f"{where} is not UTF-8 text: {error}") from None


def _decode_array(text: str, rows: int, where: str) -> np.ndarray:
    try:
        values = np.frombuffer(base64.b64decode(text, validate=True), dtype=np.float32)
    except (binascii.Error, ValueError) as error:
        raise InputError(f"{where} is not base64-encoded float32 data: {error}") from None
    if rows < 1 or values.size % rows:
        raise InputError(f"{where} holds {values.size} values, not a multiple of num_boxes = {rows}")
    return values.reshape(rows, -1)


def _read_tsv(path: Path) -> Dict[str, RegionFeatures]:
    csv.field_size_limit(sys.maxsize)
    try:
        return _tsv_rows(path)
    except UnicodeDecodeError as error:  # streamed: these files hold hundreds of megabytes
        raise InputError(f"{path} is not UTF-8 text: {error}") from None


def _tsv_rows(path: Path) -> Dict[str, RegionFeatures]:
    regions: Dict[str, RegionFeatures] = {}
    lines: Dict[str, int] = {}
    with path.open(encoding="utf-8", newline="") as handle:
        for line_number, row in enumerate(csv.DictReader(handle, fieldnames=TSV_FIELDS, delimiter="\t"), start=1):
            where = f"{path}:{line_number}"
            image_id = row["image_id"]
            if image_id in lines:
                raise InputError(f"{where}: image id {image_id!r} is also on line {lines[image_id]}; each image's "
                                 "regions must appear once")
            lines[image_id] = line_number
            if None in row or any(row[name] is None for name in TSV_FIELDS):
                raise InputError(f"{where}: expected the {len(TSV_FIELDS)} tab-separated fields {TSV_FIELDS}")
            try:
                count = int(row["num_boxes"])
                size = (float(row["image_w"]), float(row["image_h"]))
            except ValueError as error:
                raise InputError(f"{where}: num_boxes, image_w and image_h must be numbers: {error}") from None
            boxes = _decode_array(row["boxes"], count, f"{where} boxes")
            if boxes.shape[1] != 4:
                raise InputError(f"{where}: boxes hold {boxes.shape[1]} values per region, not 4")
            regions[image_id] = RegionFeatures(features=_decode_array(row["features"], count, f"{where} features"),
                                                      boxes=boxes, image_size=size)
    return regions


class RegionLookup:
    """``lookup(image)`` -> the :class:`RegionFeatures` of ``image`` (a path or name) in a table keyed by image id:
    the entry named as given, else by the file name, else by the file name without extension."""

    def __init__(self, table: Mapping[str, RegionFeatures], source: str) -> None:
        self.table = table
        self.source = source

    @classmethod
    def from_file(cls, path: Union[str, Path]) -> "RegionLookup":
        """The table of a region feature file (:func:`read_region_features`)."""
        return cls(read_region_features(path), str(path))

    def __call__(self, image: object) -> RegionFeatures:
        name = Path(str(image)).name
        for key in (str(image), name, Path(name).stem):
            if key in self.table:
                return self.table[key]
        raise InputError(f"no regions for image {str(image)!r} in {self.source}")

"""Precomputed regions looked up by image: the bridge from image names or paths (CLI, benchmarks) to a region table."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Union

from capeval.inputs import InputError
from capeval.models.regions.features import RegionFeatures
from capeval.models.regions.files import read_region_features


class RegionLookup:
    """``lookup(image)`` -> the :class:`RegionFeatures` of ``image`` (a path or name) in a table keyed by image id:
    the entry named as given, else by the file name, else by the file name without extension."""

    def __init__(self, table: Mapping[str, RegionFeatures], source: str) -> None:
        self.table = table
        self.source = source

    @classmethod
    def from_file(cls, path: Union[str, Path]) -> "RegionLookup":
        """The table of a region feature file (:func:`capeval.models.regions.files.read_region_features`)."""
        return cls(read_region_features(path), str(path))

    def __call__(self, image: object) -> RegionFeatures:
        name = Path(str(image)).name
        for key in (str(image), name, Path(name).stem):
            if key in self.table:
                return self.table[key]
        raise InputError(f"no regions for image {str(image)!r} in {self.source}")

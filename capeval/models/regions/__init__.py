"""Region features: what the region detectors produce and what the region-based metrics (TIGEr, ViLBERTScore) read.

``DETECTORS`` names the detectors ("bottom-up" for TIGEr, "x152-fpn" for ViLBERTScore) with their default weights
and extraction settings; ``DETECTORS[name].load()`` loads one (at capeval's pinned revision of its default weights).
The detector table is imported on first access (PEP 562), so that importing capeval or a scorer imports no detector
code.
"""
import importlib
from typing import Any

from capeval.models.regions.features import RegionFeatures

__all__ = ["DETECTORS", "DetectorSpec", "RegionFeatures"]


def __getattr__(name: str) -> Any:
    if name in ("DETECTORS", "DetectorSpec"):
        return getattr(importlib.import_module("capeval.models.regions.detectors"), name)
    raise AttributeError(f"module 'capeval.models.regions' has no attribute {name!r}")

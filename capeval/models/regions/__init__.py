"""Region features: what the region detectors produce and what the region-based metrics (TIGEr, ViLBERTScore) read.

``DETECTORS`` names the detectors ("bottom-up" for TIGEr, "x152-fpn" for ViLBERTScore) with their default weights
and extraction settings; ``DETECTORS[name].load()`` loads one (at capeval's pinned revision of its default weights).
"""
from capeval.models.regions.detectors import DETECTORS, DetectorSpec
from capeval.models.regions.features import RegionFeatures

__all__ = ["DETECTORS", "DetectorSpec", "RegionFeatures"]

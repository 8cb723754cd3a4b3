"""Region features: what the region detectors produce and what the region-based metrics (TIGEr, ViLBERTScore) read."""
from capeval.models.regions.features import RegionFeatures

__all__ = ["RegionFeatures"]

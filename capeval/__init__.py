"""capeval: faithful, fast image-caption evaluation metrics for the Hugging Face ecosystem.

The scorers are imported on first use (``from capeval import CLIPScore`` works as usual), so that importing capeval
or :mod:`capeval.registry` does not import torch.
"""
from typing import Any, Dict

from capeval.hub import ModelNotAvailableError
from capeval.inputs import InputError
from capeval.models.regions import RegionFeatures
from capeval.registry import FAMILIES, MetricFamily
from capeval.version import __version__

_SCORERS: Dict[str, MetricFamily] = {family.scorer_path.split(":")[1]: family for family in FAMILIES.values()}

__all__ = ["CLIPScore", "PACScore", "ViLBERTScore", "InputError", "ModelNotAvailableError", "RegionFeatures",
           "__version__"]


def __getattr__(name: str) -> Any:
    if name in _SCORERS:
        return _SCORERS[name].scorer_class()
    raise AttributeError(f"module 'capeval' has no attribute {name!r}")

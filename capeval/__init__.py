"""capeval: faithful, fast caption evaluation metrics for images and videos, for the Hugging Face ecosystem.

The scorers are imported on first use (PEP 562; ``from capeval import CLIPScore`` works as usual), so that importing
capeval, :mod:`capeval.registry` or :mod:`capeval.cli` (``capeval --help``) loads neither torch nor transformers.
The package's public names are ``__all__`` and its submodules: the names this module needs besides are private.
"""
import typing as _typing

from capeval.hub import ModelNotAvailableError
from capeval.inputs import InputError
from capeval.models.regions.features import RegionFeatures
from capeval.registry import FAMILIES as _FAMILIES
from capeval.registry import MetricFamily as _MetricFamily
from capeval.version import __version__
from capeval.video import VideoFeatures

_SCORERS: _typing.Dict[str, _MetricFamily] = {family.scorer_path.split(":")[1]: family
                                              for family in _FAMILIES.values()}
"""Public scorer class name -> its family, imported on first access."""

__all__ = [*_SCORERS, "RegionFeatures", "VideoFeatures", "InputError", "ModelNotAvailableError", "__version__"]


def __getattr__(name: str) -> _typing.Any:
    if name in _SCORERS:
        value = _SCORERS[name].scorer_class()
        globals()[name] = value
        return value
    raise AttributeError(f"module 'capeval' has no attribute {name!r}")


def __dir__() -> _typing.List[str]:
    return sorted(set(globals()) | set(__all__))

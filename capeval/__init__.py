"""capeval: faithful, fast image-caption evaluation metrics for the Hugging Face ecosystem.

The public names are imported on first use (PEP 562), so that ``import capeval.cli`` and ``capeval --help`` do not
load torch and transformers.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from capeval.inputs import InputError
from capeval.version import __version__

if TYPE_CHECKING:
    from capeval.backbones import ModelNotAvailableError
    from capeval.scorers import CLIPScore, PACScore

_LAZY = {"CLIPScore": "capeval.scorers", "PACScore": "capeval.scorers", "ModelNotAvailableError": "capeval.backbones"}
"""Public name -> module that defines it, imported on first access."""

__all__ = ["CLIPScore", "PACScore", "InputError", "ModelNotAvailableError", "__version__"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'capeval' has no attribute {name!r}")


def __dir__() -> list:
    return sorted(set(globals()) | set(__all__))

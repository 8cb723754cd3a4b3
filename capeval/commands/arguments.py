"""What several subcommands share: argument types, help text generated from the metric registry, and the flags
that stand for the Python API's parameter names in error messages."""
from __future__ import annotations

import argparse
from typing import Iterable, List, Tuple

from capeval.registry import FAMILIES, MetricFamily

FLAG_OF_PARAMETER: Tuple[Tuple[str, str], ...] = (
    ("source='hub'", "--source hub"),
    ("needs root=", "needs --data-root"),
    ("pass root=", "pass --data-root"),
    ("pass image_dir", "pass --images"),
    ("root=", "--data-root"),
    ("model=<", "--model <"),
    ("regions=<", "--detector <"),
)
"""How the API's errors name a parameter, and the flag the commands take for it (longest phrases first)."""


def in_flags(message: str) -> str:
    """An API error message with its parameter names replaced by the command line's flags."""
    for parameter, flag in FLAG_OF_PARAMETER:
        message = message.replace(parameter, flag)
    return message


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a finite number above 0."""
    value = float(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number above 0, got {text}")
    return value


def family_label(family: MetricFamily) -> str:
    """A family's scores as its description names them, before the citation: ``CLIP-S / RefCLIP-S``."""
    return family.description.split(" (", 1)[0]


def region_families() -> List[MetricFamily]:
    """The families whose scorers read image regions (precomputed region features can stand in for the images)."""
    return [family for family in FAMILIES.values() if family.region_features]


def video_families() -> List[MetricFamily]:
    """The families whose scorers score videos (``capeval score --videos``)."""
    return [family for family in FAMILIES.values() if "videos" in family.entries]


def option_families(option: str) -> List[MetricFamily]:
    """The families whose scorers take ``option`` beyond the common ones (``num_frames``: EMScore)."""
    return [family for family in FAMILIES.values() if option in family.extra_options]


def detector_users(detector: str) -> List[str]:
    """The labels of the families whose regions ``detector`` (a ``DETECTORS`` name) makes: ``["TIGEr"]``."""
    return [family.label for family in region_families() if family.detector == detector]


def listed(names: Iterable[str], last: str = "or") -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {last} {names[-1]}"

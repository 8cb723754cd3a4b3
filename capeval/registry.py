"""Every metric family capeval implements, in one table read by the ``evaluate`` adapter, the CLI, the training-loop
integration and the benchmark runner. Adding a metric adds one :class:`MetricFamily` to :data:`FAMILIES`.

Scorer classes are named by dotted path and imported on first use, so importing this module imports no model code.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, Mapping, NamedTuple, Tuple, Type

if TYPE_CHECKING:
    from capeval.scorers.base import Scorer


class BenchmarkMetric(NamedTuple):
    """One per-item result of a family's scorer, run as a benchmark metric."""

    result_key: str
    """Per-item result of the scorer (``ref_clip_scores``)."""
    uses_references: bool
    """Whether the scorer is called with the references."""
    label: str
    """Display name in benchmark reports (``RefCLIP-S``)."""


@dataclass(frozen=True)
class MetricFamily:
    """One metric family: its scorer and the names of its results."""

    name: str
    """Family name: the ``metrics/<name>`` folder, ``capeval score --metric <name>``."""
    scorer_path: str
    """``module:Class`` of the scorer."""
    description: str
    result_keys: Mapping[str, str]
    """Corpus result (each also reported per item as ``<key>s``; reference-based ones only with references) -> how
    the reference code prints it (the CLI prints it so)."""
    references: str
    """``"optional"`` (reference-based results are added when references are given), ``"required"``, or ``"unused"``
    (a reference-free metric: giving references is an error)."""
    benchmark_metrics: Mapping[str, BenchmarkMetric]
    """Benchmark metric name (``ref_clip_s``) -> which result it reads."""
    region_features: bool = False
    """Whether the scorer reads image regions, so that precomputed region features (``--regions FILE``) can stand in
    for the images."""

    def scorer_class(self) -> "Type[Scorer]":
        """The scorer class (imported now)."""
        module, name = self.scorer_path.split(":")
        return getattr(importlib.import_module(module), name)


FAMILIES: Dict[str, MetricFamily] = {
    family.name: family
    for family in (
        MetricFamily("clipscore", "capeval.scorers.clipscore:CLIPScore", references="optional",
                     description="CLIP-S / RefCLIP-S (Hessel et al., 2021) on OpenAI CLIP ViT-B/32",
                     result_keys={"clip_score": "CLIPScore", "ref_clip_score": "RefCLIPScore"},
                     benchmark_metrics={"clip_s": BenchmarkMetric("clip_scores", False, "CLIP-S"),
                                        "ref_clip_s": BenchmarkMetric("ref_clip_scores", True, "RefCLIP-S")}),
        MetricFamily("pacscore", "capeval.scorers.clipscore:PACScore", references="optional",
                     description="PAC-S / RefPAC-S (Sarto et al., 2023) on the PAC-S fine-tuned CLIP backbones",
                     result_keys={"pac_score": "PAC-S", "ref_pac_score": "RefPAC-S"},
                     benchmark_metrics={"pac_s": BenchmarkMetric("pac_scores", False, "PAC-S"),
                                        "ref_pac_s": BenchmarkMetric("ref_pac_scores", True, "RefPAC-S")}),
        MetricFamily("bridge", "capeval.scorers.bridge:BRIDGEScore", references="unused",
                     description="BRIDGE (Sarto et al., 2024): CLIP-S joined by pseudo-captions of the image's "
                                 "template caption filled from CLIP grid features",
                     result_keys={"bridge_score": "BRIDGE"},
                     benchmark_metrics={"bridge": BenchmarkMetric("bridge_scores", False, "BRIDGE")}),
        MetricFamily("tigerscore", "capeval.scorers.tiger:TIGErScore", references="required",
                     description="TIGEr (Jiang et al., 2019): SCAN text-to-image grounding of candidate and references",
                     result_keys={"tiger_score": "TIGEr"},
                     benchmark_metrics={"tiger": BenchmarkMetric("tiger_scores", True, "TIGEr")},
                     region_features=True),
        MetricFamily("vilbertscore", "capeval.scorers.vilbertscore:ViLBERTScore", references="required",
                     description="ViLBERTScore P / R / F (Lee et al., 2020) on the 12-in-1 ViLBERT, from detector regions",
                     result_keys={"vilbert_precision": "P", "vilbert_recall": "R", "vilbert_f1": "F"},
                     benchmark_metrics={"vilbert_p": BenchmarkMetric("vilbert_precisions", True, "ViLBERTScore-P"),
                                        "vilbert_r": BenchmarkMetric("vilbert_recalls", True, "ViLBERTScore-R"),
                                        "vilbert_f": BenchmarkMetric("vilbert_f1s", True, "ViLBERTScore-F")},
                     region_features=True),
    )
}
"""Metric family name -> :class:`MetricFamily`."""

BENCHMARK_METRICS: Dict[str, Tuple[str, BenchmarkMetric]] = {
    name: (family.name, metric) for family in FAMILIES.values() for name, metric in family.benchmark_metrics.items()
}
"""Benchmark metric name -> (family name, which result it reads)."""


def family(name: str) -> MetricFamily:
    """The family called ``name``; ``KeyError`` naming the known families otherwise."""
    if name not in FAMILIES:
        raise KeyError(f"unknown metric {name!r}; known metrics: {', '.join(sorted(FAMILIES))}")
    return FAMILIES[name]


def scorer_class(name: str) -> "Type[Scorer]":
    """The scorer class of the family called ``name``."""
    return family(name).scorer_class()

"""Human-judgment benchmarks (Flickr8k-Expert/CF, Composite, PASCAL-50S, FOIL, Polaris, Nebula, THumB; the video
benchmarks VATEX-EVAL and ActivityNet-FOIL) and the classic n-gram baselines (pycocoevalcap) evaluated on them.

``load_benchmark`` reads a benchmark, ``run_benchmark`` scores it with any metric callables (``builtin_metrics``
makes capeval's and the baselines'), ``markdown_report`` / ``write_report`` / ``result_to_dict`` report the result.
"""
from __future__ import annotations

from .datasets import (
    Benchmark,
    BenchmarkFormatError,
    FoilItem,
    PairwiseItem,
    ParagraphItem,
    RatedItem,
    RatedVideoItem,
    VideoSetup,
    available_benchmarks,
    check_images,
    load_benchmark,
)
from .report import markdown_report, result_to_dict, write_report
from .runner import BUILTIN_METRICS, BenchmarkResult, MetricResult, builtin_metrics, run_benchmark

__all__ = [
    "BUILTIN_METRICS",
    "Benchmark",
    "BenchmarkFormatError",
    "BenchmarkResult",
    "FoilItem",
    "MetricResult",
    "PairwiseItem",
    "ParagraphItem",
    "RatedItem",
    "RatedVideoItem",
    "VideoSetup",
    "available_benchmarks",
    "builtin_metrics",
    "check_images",
    "load_benchmark",
    "markdown_report",
    "result_to_dict",
    "run_benchmark",
    "write_report",
]

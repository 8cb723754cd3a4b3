"""Human-judgment benchmarks (Flickr8k-Expert/CF, Composite, PASCAL-50S, FOIL, Polaris, Nebula, THumB) and the
classic n-gram baselines (pycocoevalcap) evaluated on them."""
from __future__ import annotations

from .datasets import (
    Benchmark,
    BenchmarkFormatError,
    FoilItem,
    PairwiseItem,
    RatedItem,
    available_benchmarks,
    check_images,
    load_benchmark,
)

__all__ = [
    "Benchmark",
    "BenchmarkFormatError",
    "FoilItem",
    "PairwiseItem",
    "RatedItem",
    "available_benchmarks",
    "check_images",
    "load_benchmark",
]

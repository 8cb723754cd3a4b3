"""Human-judgment benchmarks for caption metrics: data model, loaders and the exact protocol each one follows.

Every loader reads a published file layout (the original release, or the layout the reference evaluation code reads)
and returns a :class:`Benchmark` whose ``protocol`` says exactly what was kept, dropped and flattened. One module per
benchmark family (``flickr8k``, ``pascal50s``, ``composite``, ``foil``, ``thumb``, ``hub_layouts`` for Polaris and
Nebula, ``polos`` for the csv / JSON record layout they share with Composite; the video benchmarks ``vatex_eval`` and
``activitynet_foil``); ``base`` holds the item types and the file readers. Texts of the image benchmarks are
whitespace-normalised (``" ".join(text.split())``) as the CLIPScore and PAC-S evaluation scripts do; nothing else is
changed. Images are named relative to an images folder; :func:`check_images` fails early on missing files. The video
benchmarks read the frame features their releases ship (:class:`VideoSetup`).
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, List, Optional

from capeval.benchmarks.datasets import (activitynet_foil, composite, flickr8k, foil, hub_layouts, pascal50s, thumb,
                                         vatex_eval)
from capeval.benchmarks.datasets.base import (Benchmark, BenchmarkFormatError, FoilItem, PairwiseItem, ParagraphItem,
                                              PathLike, RatedItem, RatedVideoItem, VideoSetup, check_images)

_LOADERS: Dict[str, Callable[..., Benchmark]] = {
    "flickr8k-expert": flickr8k.load_expert,
    "flickr8k-cf": flickr8k.load_crowdflower,
    "composite": composite.load_composite,
    "pascal-50s": pascal50s.load_pascal50s,
    "foil": foil.load_foil,
    "polaris": hub_layouts.load_polaris,
    "nebula": hub_layouts.load_nebula,
    "thumb": thumb.load_thumb,
    "vatex-eval": vatex_eval.load_vatex_eval,
    "activitynet-foil": activitynet_foil.load_activitynet_foil,
}


def available_benchmarks() -> List[str]:
    """Names accepted by :func:`load_benchmark`."""
    return sorted(_LOADERS)


def load_benchmark(name: str, root: Optional[PathLike] = None, *, source: str = "auto", **options: Any) -> Benchmark:
    """Load benchmark ``name`` from ``root`` (a folder, or the data file itself) in its published layout.

    ``source`` picks the layout ("auto" detects it): flickr8k-*: "text" | "json"; pascal-50s, foil: "json";
    composite: "amt" | "csv"; polaris, nebula: "csv" | "json" | "parquet" | "hub"; thumb: "jsonl"; vatex-eval:
    "pickle"; activitynet-foil: "json". Options: pascal-50s ``references``; foil ``references`` (1 or 4);
    vatex-eval ``references`` (0, 1 or 9 in the papers); composite ``subsets``, ``drop_first_reference``
    (TIGEr's protocol: the human candidate loses the image's first reference, not those equal to it);
    polaris / nebula ``split``,
    ``image_dir`` (where embedded hub images are written); thumb ``include_human``.
    """
    accepted = benchmark_options(name)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        allowed = ", ".join(accepted) or "none"
        raise TypeError(f"benchmark {name!r} does not take option(s) {', '.join(unknown)} (options: {allowed})")
    return _LOADERS[name](root, source, **options)


def benchmark_options(name: str) -> List[str]:
    """The options :func:`load_benchmark` takes for benchmark ``name``."""
    if name not in _LOADERS:
        raise ValueError(f"unknown benchmark {name!r}; available: {', '.join(available_benchmarks())}")
    parameters = inspect.signature(_LOADERS[name]).parameters
    return [parameter for parameter in parameters if parameter not in ("root", "source")]


__all__ = [
    "Benchmark",
    "BenchmarkFormatError",
    "FoilItem",
    "PairwiseItem",
    "ParagraphItem",
    "RatedItem",
    "RatedVideoItem",
    "VideoSetup",
    "available_benchmarks",
    "benchmark_options",
    "check_images",
    "load_benchmark",
]

"""Human-judgment benchmarks for caption metrics: data model, loaders and the exact protocol each one follows.

Every loader reads a published file layout (the original release, or the layout the reference evaluation code reads)
and returns a :class:`Benchmark` whose ``protocol`` says exactly what was kept, dropped and flattened. One module per
benchmark family (``flickr8k``, ``pascal50s``, ``composite``, ``foil``, ``thumb``, ``hub_layouts`` for Polaris and
Nebula, ``polos`` for the csv / JSON record layout they share with Composite); ``base`` holds the item types and the
file readers. Texts are whitespace-normalised (``" ".join(text.split())``) as the CLIPScore and PAC-S evaluation
scripts do; nothing else is changed. Images are named relative to an images folder; :func:`check_images` fails early
on missing files.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, List, Optional

from capeval.benchmarks.datasets import composite, flickr8k, foil, hub_layouts, pascal50s, thumb
from capeval.benchmarks.datasets.base import (Benchmark, BenchmarkFormatError, FoilItem, PairwiseItem, PathLike,
                                              RatedItem, check_images)

_LOADERS: Dict[str, Callable[..., Benchmark]] = {
    "flickr8k-expert": flickr8k.load_expert,
    "flickr8k-cf": flickr8k.load_crowdflower,
    "composite": composite.load_composite,
    "pascal-50s": pascal50s.load_pascal50s,
    "foil": foil.load_foil,
    "polaris": hub_layouts.load_polaris,
    "nebula": hub_layouts.load_nebula,
    "thumb": thumb.load_thumb,
}


def available_benchmarks() -> List[str]:
    """Names accepted by :func:`load_benchmark`."""
    return sorted(_LOADERS)


def load_benchmark(name: str, root: Optional[PathLike] = None, *, source: str = "auto", **options: Any) -> Benchmark:
    """Load benchmark ``name`` from ``root`` (a folder, or the data file itself) in its published layout.

    ``source`` picks the layout ("auto" detects it): flickr8k-*: "text" | "json"; pascal-50s, foil: "json";
    composite: "amt" | "csv"; polaris, nebula: "csv" | "json" | "parquet" | "hub"; thumb: "jsonl". Options:
    pascal-50s ``references``; foil ``references`` (1 or 4); composite ``subsets``, ``drop_first_reference``
    (TIGEr's protocol: the human candidate loses the image's first reference, not those equal to it);
    polaris / nebula ``split``,
    ``image_dir`` (where embedded hub images are written); thumb ``include_human``.
    """
    if name not in _LOADERS:
        raise ValueError(f"unknown benchmark {name!r}; available: {', '.join(available_benchmarks())}")
    loader = _LOADERS[name]
    accepted = [parameter for parameter in inspect.signature(loader).parameters if parameter not in ("root", "source")]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        allowed = ", ".join(accepted) or "none"
        raise TypeError(f"benchmark {name!r} does not take option(s) {', '.join(unknown)} (options: {allowed})")
    return loader(root, source, **options)


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

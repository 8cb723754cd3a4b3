"""The throughput workloads: which Flickr8k files are scored, and the (image, candidate, references) pairs made of
them (the Expert shape, one caption per image, and the streamed pairs' cycling inputs); the distinct Expert items of
some images, which ``vilbertscore_speed.py`` and ``polos_speed.py`` score."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Sequence, Tuple

import numpy as np
from PIL import Image

from capeval.benchmarks import load_benchmark

FULL_IMAGES = 1125
"""The 1,000 Flickr8k-Expert images of ``images_224`` and the 125 original JPEGs of ``images_original``."""
ORIGINALS_SHARE = 125 / 1125
WARM_UP_CAPTION = "a warm-up caption that is not in any workload"


@dataclass(frozen=True)
class Workload:
    """Pairs to score: one image path, one candidate and the image's references per pair."""

    images: Tuple[str, ...]
    candidates: Tuple[str, ...]
    references: Tuple[Tuple[str, ...], ...]

    def __len__(self) -> int:
        return len(self.candidates)


@dataclass(frozen=True)
class Flickr8kFiles:
    """The selected image files and, per Flickr8k image name, its Expert candidates and its references."""

    files: Tuple[Tuple[str, Path], ...]
    candidates: Dict[str, Tuple[str, ...]]
    references: Dict[str, Tuple[str, ...]]
    all_captions: Tuple[str, ...]


def select_files(data_dir: Path, n_images: int) -> Flickr8kFiles:
    """The first ``n_images`` files: ``images_224`` files in Expert order, then originals in the same share as in
    the full set (125 of 1,125)."""
    benchmark = load_benchmark("flickr8k-expert", data_dir)
    candidates: Dict[str, List[str]] = {}
    references: Dict[str, Tuple[str, ...]] = {}
    for item in benchmark.items:
        image_candidates = candidates.setdefault(item.image, [])
        if item.candidate not in image_candidates:  # three ratings per pair: keep the pair once
            image_candidates.append(item.candidate)
        references[item.image] = item.references
    names = list(candidates)
    originals = [name for name in names if (data_dir / "images_original" / name).is_file()]
    n_originals = min(len(originals), round(n_images * ORIGINALS_SHARE))
    n_squashed = min(len(names), n_images - n_originals)
    files = [(name, data_dir / "images_224" / name) for name in names[:n_squashed]]
    files += [(name, data_dir / "images_original" / name) for name in originals[:n_originals]]
    all_captions = tuple(line.split("\t", 1)[1].strip()
                         for line in (data_dir / "Flickr8k.token.txt").read_text().splitlines() if "\t" in line)
    return Flickr8kFiles(tuple(files), {name: tuple(texts) for name, texts in candidates.items()}, references,
                         all_captions)


def expert_workload(selection: Flickr8kFiles) -> Workload:
    """Every Expert pair of every selected file, with the image's references."""
    images, candidates, references = [], [], []
    for name, path in selection.files:
        for candidate in selection.candidates[name]:
            images.append(str(path))
            candidates.append(candidate)
            references.append(selection.references[name])
    return Workload(tuple(images), tuple(candidates), tuple(references))


def one_caption_workload(selection: Flickr8kFiles) -> Workload:
    """One pair per file; the caption is a reference of the image (the second one for originals), so all differ."""
    images, candidates, references = [], [], []
    for name, path in selection.files:
        refs = selection.references[name]
        images.append(str(path))
        candidates.append(refs[1] if path.parent.name == "images_original" else refs[0])
        references.append(refs)
    return Workload(tuple(images), tuple(candidates), tuple(references))


def cycled(values: Sequence[Any], count: int) -> Iterator[Any]:
    """``count`` values cycling over ``values``, produced lazily."""
    for index in range(count):
        yield values[index % len(values)]


def warm_up_image() -> Image.Image:
    """A seeded noise image that is in no workload."""
    pixels = np.random.default_rng(0).integers(0, 256, size=(224, 224, 3), dtype=np.uint8)
    return Image.fromarray(pixels, mode="RGB")

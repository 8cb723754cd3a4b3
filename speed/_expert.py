"""The Flickr8k-Expert shape of the region and BRIDGE speed scripts: one item per distinct (image, candidate) pair
of Flickr8k-Expert (the release rates each pair three times) on the first images, each with the image's five
references. On all 1,000 images: 5,664 items."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from _paths import FLICKR8K_DIR

FULL_IMAGES = 1000
"""Images of Flickr8k-Expert."""


def expert_items(data_dir: Path = FLICKR8K_DIR, images: Optional[int] = None) -> Tuple[List, List[str], List[str]]:
    """``(items, images, captions)``: the distinct (image, candidate) items (``capeval.benchmarks.RatedItem``) of the
    first ``images`` Expert images (all when ``None``) in the release's order, those image names, and every text of the
    release (candidates and references, for the random models' vocabularies)."""
    from capeval.benchmarks import load_benchmark

    benchmark = load_benchmark("flickr8k-expert", data_dir)
    names = benchmark.images()[:images]
    kept = set(names)
    items = list({(item.image, item.candidate): item for item in benchmark.items if item.image in kept}.values())
    captions = [text for item in benchmark.items for text in (item.candidate, *item.references)]
    return items, names, captions


def texts_per_image(items: Sequence, names: Sequence[str]) -> int:
    """The (image, text) pairs a scorer that encodes each distinct text of an image once encodes."""
    return sum(len({text for item in items if item.image == name for text in (item.candidate, *item.references)})
               for name in names)

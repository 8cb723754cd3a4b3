"""The Flickr8k-Expert shape of the region and BRIDGE speed scripts: one item per distinct (image, candidate) pair
of Flickr8k-Expert (the release rates each pair three times) on the first images, each with the image's five
references. On all 1,000 images: 5,664 items."""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Sequence, Tuple, TypeVar

from _paths import FLICKR8K_DIR

FULL_IMAGES = 1000
"""Images of Flickr8k-Expert."""

Inputs = TypeVar("Inputs")


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


def expert_parser(description: str, work_dir: str, forward_help: str) -> argparse.ArgumentParser:
    """The command line every Expert-shape script shares: ``--images``, ``--device``, ``--threads``, ``--data-dir``
    (also ``--data``), ``--work-dir`` (default ``work_dir`` in the system's temporary folder), ``--forward`` and
    ``--json-out``; a script adds its own options."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--images", type=int, default=FULL_IMAGES, help="Expert images to use (default: all)")
    parser.add_argument("--device", default="cpu", help="device of the model (cpu, cuda, ...)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument("--data-dir", "--data", dest="data_dir", type=Path, default=FLICKR8K_DIR,
                        help="folder with ExpertAnnotations.txt, Flickr8k.token.txt (and images_224/ for BRIDGE)")
    parser.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / work_dir,
                        help="where the random models are built and kept")
    parser.add_argument("--forward", action="store_true", help=forward_help)
    parser.add_argument("--json-out", type=Path)
    return parser


def streamed_by_image(items: Sequence, make: Callable[[str], Inputs]) -> Iterator[Inputs]:
    """Each item's image inputs (its regions), made by ``make(image)`` when the image's first item comes and let go
    after its last. The items come grouped by image in the release's order (:func:`expert_items`), so ``make`` is
    called once per image, in that order, and the consecutive items of an image share one object. The scorer holds
    at most a chunk's images at a time: the inputs kept in memory do not grow with the workload, and its peak memory
    measures the scorer, not the caller's arrays."""
    image, inputs = None, None
    for item in items:
        if item.image != image:
            image, inputs = item.image, make(item.image)
        yield inputs

"""ViLBERTScore throughput from precomputed regions: (candidate, reference) pairs per second.

    python speed/vilbertscore_speed.py [--images N] [--device cpu|cuda] [--batch-size B] [--work-dir DIR]

Model: a full-size ViLBERT trunk (``bert_base_6layer_6conect``: BERT-base text stream, 1024-wide visual stream and
co-attention, task tokens) with seeded random weights, saved once under ``--work-dir`` with a 30,522-token WordPiece
vocabulary made of the Flickr8k caption words (same shapes and operations as ``capeval/vilbert-multi-task``, so the
same cost). Workload: the Flickr8k-Expert shape: every distinct (image, candidate) pair of Flickr8k-Expert on the
first ``--images`` images (all 1,000 by default) with the image's 5 references, read from ``--data-dir`` (default
``$CAPEVAL_FLICKR8K_DIR``, else ``shared/data/flickr8k`` beside the repository); each image gets 100 random regions
of 2048-d features with boxes. Timed: ``ViLBERTScore.score`` from ``RegionFeatures`` and strings to scores, after a
warm-up item. Reported: items, pairs (5 per item), texts encoded (each distinct (image, text) once) against the
reference's forwards (candidate + 5 references per item), seconds, pairs/s.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from _measurement import timed
from _models import random_vilbert_folder
from _paths import FLICKR8K_DIR
from _throughput.workloads import distinct_items
from capeval.benchmarks import RatedItem, load_benchmark
from capeval.models.regions import RegionFeatures
from capeval.scorers.vilbertscore import ViLBERTScore


def random_regions(seed: int) -> RegionFeatures:
    """100 seeded random regions of 2048-d features with boxes in a 500 x 375 image."""
    rng = np.random.default_rng(seed)
    width, height = 500.0, 375.0
    x1, y1 = rng.uniform(0, width - 10, 100), rng.uniform(0, height - 10, 100)
    boxes = np.stack([x1, y1, np.minimum(x1 + rng.uniform(5, 300, 100), width),
                      np.minimum(y1 + rng.uniform(5, 300, 100), height)], axis=1)
    return RegionFeatures(np.abs(rng.standard_normal((100, 2048))).astype(np.float32), boxes, (width, height))


def texts_encoded(items: Sequence[RatedItem], images: Sequence[str]) -> int:
    """The (image, text) rows capeval encodes: each distinct candidate or reference of an image once."""
    return sum(len({text for item in items if item.image == image for text in (item.candidate, *item.references)})
               for image in images)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--data-dir", default=str(FLICKR8K_DIR))
    parser.add_argument("--work-dir", default="/tmp/capeval-bench-vilbert")
    parser.add_argument("--json-out")
    args = parser.parse_args()

    benchmark = load_benchmark("flickr8k-expert", args.data_dir)
    images = benchmark.images()[:args.images]
    items = distinct_items(benchmark, images)
    folder = random_vilbert_folder(Path(args.work_dir) / "vilbert-random",
                                   [text for item in benchmark.items for text in (item.candidate, *item.references)])
    regions = {image: random_regions(index) for index, image in enumerate(images)}

    scorer = ViLBERTScore(model=str(folder), device=args.device, batch_size=args.batch_size)
    scorer.score([random_regions(10**6)], ["a warm-up caption"], [["a reference"]])
    seconds, _, _ = timed(lambda: scorer.score([regions[item.image] for item in items],
                                               [item.candidate for item in items],
                                               [list(item.references) for item in items]))
    pairs = sum(len(item.references) for item in items)
    report = {"device": args.device, "threads": torch.get_num_threads(), "images": len(images), "items": len(items),
              "pairs": pairs, "texts_encoded": texts_encoded(items, images), "reference_forwards": pairs + len(items),
              "seconds": round(seconds, 2), "pairs_per_second": round(pairs / seconds, 2)}
    print(json.dumps(report))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()

"""ViLBERTScore throughput from precomputed regions on the Flickr8k-Expert shape, and the trunk's FLOP rate.

    python speed/vilbertscore_speed.py [--images N] [--device cpu|cuda] [--threads T] [--batch-size B] [--forward]
                                       [--work-dir DIR] [--json-out FILE]

Model: a full-size ViLBERT trunk (``bert_base_6layer_6conect``: BERT-base text stream, 1024-wide visual stream and
co-attention, task tokens) with seeded random weights, saved once under ``--work-dir`` with a 30,522-token WordPiece
vocabulary made of the Flickr8k caption words (same shapes and operations as ``capeval/vilbert-multi-task``, so the same
cost). Workload: the Flickr8k-Expert shape (``_expert.py``): every distinct (image, candidate) pair of the first
``--images`` images (5,664 items on all 1,000) with the image's 5 references, read from ``--data-dir`` (default
``$CAPEVAL_FLICKR8K_DIR``, else ``shared/data/flickr8k`` beside the repository); each image gets 100 random regions of
2048-d features with boxes, made when its first item is scored (``_expert.streamed_by_image``). Timed:
``ViLBERTScore.score`` from ``RegionFeatures`` and strings to scores, after a warm-up item. Reported: items, pairs (5
per item), texts encoded (each distinct (image, text) once) against the reference's forwards (candidate + 5 references
per item), seconds, CPU seconds, items/s, pairs/s, peak memory (``VmHWM``). ``--forward`` then times the trunk alone on
one ready batch of the workload's (regions, text) pairs (best of 3), with its model FLOPs (``_flops.py``).
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Sequence

from _expert import expert_items, expert_parser, streamed_by_image, texts_per_image

REGIONS = 100


def random_regions(seed: int) -> Any:
    """100 seeded random regions of 2048-d features with boxes in a 500 x 375 image."""
    import numpy as np

    from capeval.models.regions import RegionFeatures

    rng = np.random.default_rng(seed)
    width, height = 500.0, 375.0
    x1, y1 = rng.uniform(0, width - 10, REGIONS), rng.uniform(0, height - 10, REGIONS)
    boxes = np.stack([x1, y1, np.minimum(x1 + rng.uniform(5, 300, REGIONS), width),
                      np.minimum(y1 + rng.uniform(5, 300, REGIONS), height)], axis=1)
    return RegionFeatures(np.abs(rng.standard_normal((REGIONS, 2048))).astype(np.float32), boxes, (width, height))


def trunk_forward(scorer: Any, regions: List[Any], texts: List[str], batch_size: int) -> Dict[str, float]:
    """The trunk alone on ``batch_size`` ready (regions, text) pairs of the workload, as the scorer batches them: best
    of 3 seconds and the model FLOP rate."""
    import torch

    from _flops import vilbert_macs
    from _measurement import forward_rate
    from capeval.models.vilbert.preprocessing import region_inputs

    model, tokenizer = scorer.vilbert.model, scorer.vilbert.tokenizer
    device = next(model.parameters()).device
    input_ids, attention_mask, _ = tokenizer.encode(texts[:batch_size])
    prepared = [region_inputs(regions[row % len(regions)]) for row in range(len(input_ids))]
    features = torch.stack([pair[0] for pair in prepared]).to(device)
    locations = torch.stack([pair[1] for pair in prepared]).to(device)
    ids, mask = torch.from_numpy(input_ids).to(device), torch.from_numpy(attention_mask).to(device)
    task_ids = torch.full((len(ids), 1), scorer.task_id, device=device) if scorer.task_id is not None else None
    text_tokens = ids.shape[1] + (task_ids is not None)

    def forward() -> float:
        with torch.inference_mode():
            return float(model(ids, mask, features, locations, task_ids=task_ids)[scorer.layer][0, 0, 0])

    return forward_rate(forward, len(ids) * vilbert_macs(model.config, text_tokens, features.shape[1]))


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = expert_parser(__doc__.split("\n")[0], "capeval-bench-vilbert",
                           "also time the trunk alone on a ready batch")
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args(argv)

    import torch

    from _measurement import peak_rss_mb, timed
    from _models import random_vilbert_folder
    from capeval.scorers.vilbertscore import ViLBERTScore

    if args.threads:
        torch.set_num_threads(args.threads)
    items, images, captions = expert_items(args.data_dir, args.images)
    folder = random_vilbert_folder(args.work_dir / "vilbert-random", captions)
    seeds = {image: index for index, image in enumerate(images)}

    scorer = ViLBERTScore(model=str(folder), device=args.device, batch_size=args.batch_size)
    scorer.score([random_regions(10**6)], ["a warm-up caption"], [["a reference"]])
    candidates, references = [item.candidate for item in items], [list(item.references) for item in items]
    seconds, cpu_seconds, _ = timed(lambda: scorer.score(
        streamed_by_image(items, lambda image: random_regions(seeds[image])), candidates, references))
    pairs = sum(len(item.references) for item in items)
    report: Dict[str, Any] = {
        "family": "vilbertscore", "device": args.device, "threads": torch.get_num_threads(), "images": len(images),
        "items": len(items), "references": 5, "pairs": pairs, "texts_encoded": texts_per_image(items, images),
        "reference_forwards": pairs + len(items), "seconds": round(seconds, 2), "cpu_seconds": round(cpu_seconds, 2),
        "items_per_second": round(len(items) / seconds, 2), "pairs_per_second": round(pairs / seconds, 2),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "memory_cache_mb": round(scorer.engine.memory_cache_nbytes / 2**20, 1)}
    if args.forward:
        texts = [text for item in items for text in (item.candidate, *item.references)]
        first = items[:args.batch_size]  # trunk_forward takes a batch's regions: the first items', six rows each
        report["forward"] = {"trunk": trunk_forward(scorer, [regions for regions in streamed_by_image(
            first, lambda image: random_regions(seeds[image])) for _ in range(6)], texts, args.batch_size)}
    print(json.dumps(report))
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()

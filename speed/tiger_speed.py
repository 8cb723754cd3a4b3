"""TIGEr throughput from precomputed region features on the Flickr8k-Expert shape, and its forwards' FLOP rates.

    python speed/tiger_speed.py [--data-dir DIR] [--images N] [--nltk-data ROOT] [--threads T] [--device cpu|cuda]
                                [--forward] [--json-out FILE]

Model: a full-size SCAN (vocabulary 11,353 x 300, bidirectional GRU 300 -> 1024, ``Linear(2048 -> 1024)``) with random
weights and the published COCO vocabulary (``hub_models/capeval/tiger-scan-coco/vocab.json``), built once under
``--work-dir``; random weights cost what the real ones cost. Regions: one random ``(36, 2048)`` ``RegionFeatures`` per
image, made when its first item is scored (``_expert.streamed_by_image``). Items: the Flickr8k-Expert shape
(``_expert.py``): every distinct (image, candidate) pair of the first ``--images`` images (5,664 items on all 1,000)
with the image's five references. The model is loaded and one warm-up item scored first (not timed); then the whole
workload is scored from caption strings and region features. Reported: wall and CPU seconds, items/s, peak memory
(``VmHWM``), and how many distinct regions, captions and (regions, caption) pairs were computed. ``--forward`` then
times each forward alone on a ready batch of the workload's inputs (best of 3): the GRU over a text batch, the region
projection over an image batch, and the float64 groundings of a batch of pairs, with their model FLOPs (``_flops.py``).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from _expert import expert_items, expert_parser, streamed_by_image

REGIONS = 36


def parse_arguments(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = expert_parser(__doc__.split("\n\n")[0], "capeval-benchmarks",
                           "also time each forward alone on a ready batch")
    parser.add_argument("--nltk-data", type=Path, help="NLTK data root holding tokenizers/punkt_tab/english "
                        "(default: NLTK's search path)")
    parser.add_argument("--batch-size", type=int, default=64, help="images per forward pass")
    parser.add_argument("--text-batch-size", type=int, default=256, help="captions per forward pass")
    return parser.parse_args(argv)


def forwards(scorer: Any, captions: List[str], regions: List[Any], batch_size: int,
             text_batch_size: int) -> Dict[str, Dict[str, float]]:
    """The GRU, the region projection and the groundings alone on ready batches of the workload: best-of-3 seconds and
    model FLOP rates."""
    import numpy as np
    import torch

    from _flops import grounding_macs, gru_macs, scan_region_macs
    from _measurement import forward_rate
    from capeval.functional.tigerscore import grounding

    scan = scorer.scan
    config = scan.config
    ordered = sorted((scan.tokenizer.encode(text) for text in dict.fromkeys(captions)), key=len)
    start = max(0, len(ordered) // 2 - text_batch_size // 2)  # a batch of median lengths, as capeval's plan makes
    ids = ordered[start:start + text_batch_size]
    features = torch.from_numpy(np.stack([region.features for region in regions[:batch_size]])).to(scan.device)
    words = [row.float().cpu().numpy() for row in scan.model.encode_token_ids(ids)]
    embedded = scan.model.encode_regions(features).float().cpu().numpy()
    pairs = [(embedded[index % len(embedded)], words[index]) for index in range(len(words))]
    return {
        "gru": forward_rate(lambda: float(scan.model.encode_token_ids(ids)[0][0, 0]),
                            gru_macs(config, sum(len(row) for row in ids))),
        "region_projection": forward_rate(lambda: float(scan.model.encode_regions(features)[0, 0, 0]),
                                          scan_region_macs(config, len(features) * REGIONS)),
        "grounding_float64": forward_rate(
            lambda: float(sum(grounding(image, text, config.lambda_softmax)[0] for image, text in pairs)),
            sum(grounding_macs(config, len(text), REGIONS) for _, text in pairs)),
    }


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_arguments(argv)
    import numpy as np
    import torch

    from _measurement import peak_rss_mb, timed
    from _models import SEED, random_scan_folder
    from capeval import RegionFeatures, TIGErScore

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.nltk_data:
        import nltk

        nltk.data.path.insert(0, str(args.nltk_data))
    items, names, _ = expert_items(args.data_dir, args.images)

    def seeded_regions() -> Callable[[str], Any]:
        """The images' regions in the order of ``names``, from one generator seeded with ``SEED``: the same arrays
        as the originals' runners make for the same images."""
        rng = np.random.default_rng(SEED)
        return lambda name: RegionFeatures(features=rng.random((REGIONS, 2048), dtype=np.float32) * 2)

    folder = random_scan_folder(args.work_dir)
    scorer = TIGErScore(model=folder, device=args.device, batch_size=args.batch_size,
                        text_batch_size=args.text_batch_size)
    warm_up = RegionFeatures(features=np.random.default_rng(SEED + 1).random((REGIONS, 2048), dtype=np.float32) * 2)
    scorer.score([warm_up], ["a warm-up caption that is not in the workload"], [items[0].references])
    candidates = [item.candidate for item in items]
    references = [list(item.references) for item in items]
    wall, cpu, result = timed(lambda: scorer.score(streamed_by_image(items, seeded_regions()), candidates, references))
    report: Dict[str, Any] = {
        "family": "tigerscore", "device": args.device, "threads": torch.get_num_threads(), "images": len(names),
        "items": len(items), "references": 5, "seconds": round(wall, 2), "cpu_seconds": round(cpu, 2),
        "items_per_second": round(len(items) / wall, 1), "computed": dict(scorer.engine.encoded),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "memory_cache_mb": round(scorer.engine.memory_cache_nbytes / 2**20, 1), "tiger_score": result["tiger_score"],
    }
    if args.forward:
        first_regions = seeded_regions()
        report["forward"] = forwards(scorer, [*candidates, *(text for refs in references for text in refs)],
                                     [first_regions(name) for name in names[:args.batch_size]], args.batch_size,
                                     args.text_batch_size)
    print(json.dumps(report, indent=2))
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

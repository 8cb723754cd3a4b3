"""TIGEr throughput from precomputed region features: the Flickr8k-Expert workload on CPU.

    python speed/tiger_speed.py --data <flickr8k folder> [--nltk-data <root>] [--threads T]

Model: a full-size SCAN (vocabulary 11,353 x 300, bidirectional GRU 300 -> 1024, ``Linear(2048 -> 1024)``) with
random weights and the published COCO vocabulary (``hub_models/capeval/tiger-scan-coco/vocab.json``), built once
under ``--work-dir``; random weights cost what the real ones cost. Regions: one random ``(36, 2048)``
``RegionFeatures`` per image. Items: every Flickr8k-Expert item (16,992 for the full release: each kept (image,
candidate) pair once per expert rating) with the image's five references. The model is loaded and one warm-up item
scored first (not timed); then the whole workload is scored from caption strings and region features. Reported:
wall and CPU seconds, items/s, and how many distinct regions, captions and (regions, caption) pairs were computed.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from _measurement import peak_rss_mb, timed
from _models import SEED, random_scan_folder
from capeval import RegionFeatures, TIGErScore
from capeval.benchmarks import load_benchmark


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True,
                        help="folder with ExpertAnnotations.txt, Flickr8k.token.txt")
    parser.add_argument("--nltk-data", type=Path, help="NLTK data root holding tokenizers/punkt_tab/english "
                        "(default: NLTK's search path)")
    parser.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "capeval-benchmarks")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument("--batch-size", type=int, default=64, help="images per forward pass")
    parser.add_argument("--text-batch-size", type=int, default=256, help="captions per forward pass")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.nltk_data:
        import nltk

        nltk.data.path.insert(0, str(args.nltk_data))
    benchmark = load_benchmark("flickr8k-expert", args.data)
    items = benchmark.items
    rng = np.random.default_rng(SEED)
    regions = {image: RegionFeatures(features=rng.random((36, 2048), dtype=np.float32) * 2)
               for image in benchmark.images()}
    folder = random_scan_folder(args.work_dir)
    scorer = TIGErScore(model=folder, device="cpu", batch_size=args.batch_size, text_batch_size=args.text_batch_size)
    scorer.score([regions[items[0].image]], ["a warm-up caption that is not in the workload"], [items[0].references])
    images = [regions[item.image] for item in items]
    candidates = [item.candidate for item in items]
    references = [list(item.references) for item in items]
    wall, cpu, result = timed(lambda: scorer.score(images, candidates, references))
    report = {
        "items": len(items), "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
        "items_per_s": round(len(items) / wall, 1),
        "threads": torch.get_num_threads(), "computed": dict(scorer.engine.encoded),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "tiger_score": result["tiger_score"],
    }
    print(json.dumps(report, indent=2))
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

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
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from capeval import RegionFeatures, TIGErScore  # noqa: E402
from capeval.benchmarks import load_benchmark  # noqa: E402
from capeval.models.scan.configuration import ScanConfig  # noqa: E402
from capeval.models.scan.loading import WEIGHTS_NAME  # noqa: E402
from capeval.models.scan.modeling import ScanModel  # noqa: E402
from capeval.models.scan.tokenization import VOCAB_NAME, read_vocab, write_vocab  # noqa: E402

PUBLISHED_VOCAB = REPO_ROOT / "hub_models" / "capeval" / "tiger-scan-coco" / VOCAB_NAME
SEED = 0


def random_scan_folder(work_dir: Path) -> Path:
    """A converted SCAN folder with the published dimensions and vocabulary and seeded random weights."""
    folder = work_dir / f"random-tiger-scan-seed{SEED}"
    if (folder / WEIGHTS_NAME).is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    vocab = read_vocab(PUBLISHED_VOCAB)
    config = ScanConfig(vocab_size=len(vocab))
    torch.manual_seed(SEED)
    save_file({k: v.contiguous() for k, v in ScanModel(config).state_dict().items()}, str(folder / WEIGHTS_NAME))
    config.save(folder)
    write_vocab(vocab, folder)
    return folder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="folder with ExpertAnnotations.txt, Flickr8k.token.txt")
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
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    result = scorer.score(images, candidates, references)
    wall, cpu = time.perf_counter() - wall_start, time.process_time() - cpu_start
    report = {
        "items": len(items), "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "items_per_s": round(len(items) / wall, 1),
        "threads": torch.get_num_threads(), "computed": dict(scorer.engine.encoded),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "tiger_score": result["tiger_score"],
    }
    print(json.dumps(report, indent=2))
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

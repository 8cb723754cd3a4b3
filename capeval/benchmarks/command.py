"""``capeval benchmark``: run metrics on a human-judgment benchmark and write JSON, Markdown and plots."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from capeval.benchmarks.datasets import available_benchmarks, load_benchmark
from capeval.benchmarks.report import markdown_report, write_report
from capeval.benchmarks.runner import BUILTIN_METRICS, builtin_metrics, run_benchmark


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``benchmark`` subcommand to the capeval command's subparsers."""
    parser = subparsers.add_parser(
        "benchmark",
        help="correlation / accuracy of metrics against human judgments",
        description="Run metrics on a human-judgment benchmark with the papers' protocol; print a Markdown table and "
                    "write results.json, results.md and plots to --output.",
    )
    parser.add_argument("--dataset", required=True, choices=available_benchmarks(), help="which benchmark")
    parser.add_argument("--metric", required=True, action="append", choices=BUILTIN_METRICS,
                        help="a metric to run (repeat for several; the first is the baseline of paired comparisons)")
    parser.add_argument("--images", type=Path, help="folder holding the benchmark's images (embedding metrics)")
    parser.add_argument("--regions", type=Path,
                        help="region feature file keyed by image name (.npz or bottom-up .tsv) for the region-based "
                             "metrics (vilbert_p, vilbert_r, vilbert_f)")
    parser.add_argument("--data-root", type=Path, help="folder holding the benchmark's annotation files")
    parser.add_argument("--model", help="hub id or local folder replacing the default model of CLIP-S / PAC-S")
    parser.add_argument("--device", help="torch device (default: Accelerate's)")
    parser.add_argument("--batch-size", type=positive_int, default=64, help="images per forward pass")
    parser.add_argument("--bootstrap", type=positive_int, default=1000,
                        help="image-level bootstrap resamples for the 95%% intervals and paired tests (default 1000; "
                             "about 7 ms per resample and metric on Flickr8k-Expert)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap resamples (default 0)")
    parser.add_argument("--ties", choices=["half", "wrong"], default="half",
                        help="credit of a metric tie in pairwise / FOIL accuracy (default: half)")
    parser.add_argument("--output", type=Path, help="folder for results.json, results.md and the plots")
    parser.set_defaults(handler=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Handler of ``capeval benchmark``."""
    benchmark = load_benchmark(args.dataset, args.data_root)
    metrics = builtin_metrics(args.metric, model=args.model, device=args.device, batch_size=args.batch_size,
                              regions=args.regions)
    result = run_benchmark(benchmark, metrics, args.images, n_resamples=args.bootstrap, seed=args.seed, ties=args.ties,
                           on_metric=lambda name: print(f"running {name} on {benchmark.name} "
                                                        f"({len(benchmark.items)} items)", file=sys.stderr))
    print(markdown_report(result))
    if args.output is not None:
        for path in write_report(result, args.output):
            print(f"wrote {path}", file=sys.stderr)
    return 0


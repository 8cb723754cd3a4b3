"""``capeval benchmark``: run metrics on a human-judgment benchmark and write JSON, Markdown and plots.

The benchmark API (:func:`capeval.benchmarks.load_benchmark`, :func:`capeval.benchmarks.run_benchmark`) names its
parameters in its errors as Python does (``root=<folder>``, ``image_dir=<folder>``); the options' ``dest`` are
those keywords, so that the command reports them by its flags (:func:`capeval.commands.arguments.in_flags`).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from capeval.benchmarks.datasets import available_benchmarks, benchmark_options, load_benchmark
from capeval.benchmarks.report import markdown_report, write_report
from capeval.benchmarks.runner import BUILTIN_METRICS, builtin_metrics, run_benchmark
from capeval.commands.arguments import positive_int, region_families, set_handler
from capeval.inputs import InputError
from capeval.outputs import check_output_folder
from capeval.registry import BENCHMARK_METRICS

SOURCES = ("auto", "text", "json", "csv", "parquet", "hub", "amt", "jsonl", "pickle")
"""Values of ``load_benchmark(source=...)`` across the benchmarks (each benchmark accepts some, see its loader)."""

def split_models(values: Optional[List[str]]) -> Tuple[Optional[str], Dict[str, str]]:
    """``--model`` values as (the model for every embedding metric, {metric: model}).

    ``METRIC=MODEL`` gives one metric its model when ``METRIC`` is a built-in metric name; any other value is a
    model for every embedding metric without its own. A metric given twice, or two models for all, is refused.
    """
    shared: List[str] = []
    per_metric: Dict[str, str] = {}
    for value in values or ():
        name, separator, model = value.partition("=")
        if not separator or name not in BUILTIN_METRICS:
            shared.append(value)
            continue
        if name not in BENCHMARK_METRICS:
            raise InputError(f"--model {value}: {name} takes no model (models choose the backbone of "
                             f"{', '.join(BENCHMARK_METRICS)})")
        if name in per_metric:
            raise InputError(f"--model given twice for {name}: {per_metric[name]!r} and {model!r}")
        if not model:
            raise InputError(f"--model {value}: the model after '=' is empty")
        per_metric[name] = model
    if len(shared) > 1:
        raise InputError(f"--model given {len(shared)} times without a metric ({', '.join(map(repr, shared))}); "
                         "give each metric its model with --model <metric>=<model>")
    return (shared[0] if shared else None), per_metric


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
    parser.add_argument("--images", type=Path, dest="image_dir", metavar="IMAGES",
                        help="folder holding the benchmark's images (embedding metrics; the video benchmarks read "
                             "the feature files of their release folder instead)")
    region_metrics = [name for family in region_families() for name in family.benchmark_metrics]
    parser.add_argument("--regions", type=Path,
                        help="precomputed region features keyed by image id (.npz as `capeval regions` writes, or a "
                             f"bottom-up-attention .tsv) for the region-based metrics ({', '.join(region_metrics)}), "
                             "which then need no images")
    parser.add_argument("--data-root", type=Path, dest="root", metavar="DATA_ROOT",
                        help="folder (or file) holding the benchmark's annotations")
    parser.add_argument("--source", choices=SOURCES, default="auto",
                        help="layout of the annotations (default: detected); 'hub' loads Polaris / Nebula online")
    parser.add_argument("--references", type=int, metavar="N",
                        help="references kept per item, for the benchmarks that choose them: vatex-eval (0, 1 or 9 "
                             "in the papers; default 1, as VATEX-EVAL-demo.py), foil (1 or 4; default 4), "
                             "pascal-50s (default: all)")
    parser.add_argument("--composite-drop-first-reference", action="store_true",
                        help="composite: TIGEr's protocol, where the human candidate loses the image's first "
                             "reference (not the references equal to it) and machine candidates keep all")
    parser.add_argument("--model", action="append", metavar="[METRIC=]MODEL",
                        help="hub id or local folder replacing the default backbone: METRIC=MODEL for one metric "
                             f"({', '.join(BENCHMARK_METRICS)}; repeat for several), or MODEL for all of them when "
                             "they are of one family (one scorer)")
    parser.add_argument("--device", help="torch device (default: Accelerate's)")
    parser.add_argument("--batch-size", type=positive_int, default=64, help="images per forward pass")
    parser.add_argument("--cache-dir", type=Path,
                        help="on-disk feature cache of the scorers: a later run on the same images and texts (another "
                             "benchmark, more metrics) encodes only what is new")
    parser.add_argument("--bootstrap", type=positive_int, default=1000,
                        help="image-level bootstrap resamples for the 95%% intervals and paired tests (default 1000; "
                             "about 7 ms per resample and metric on Flickr8k-Expert)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap resamples (default 0)")
    parser.add_argument("--ties", choices=["half", "wrong"],
                        help="credit of a metric tie in pairwise / FOIL accuracy (default: the benchmark's protocol: "
                             "wrong for activitynet-foil, whose demo counts only strictly higher scores, half for "
                             "the others)")
    parser.add_argument("--output", type=Path, help="folder for results.json, results.md and the plots")
    set_handler(parser, run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Handler of ``capeval benchmark``."""
    if args.output is not None:
        check_output_folder(args.output)
    model, models = split_models(args.model)
    options: Dict[str, Any] = {}
    if args.composite_drop_first_reference:
        if args.dataset != "composite":
            raise InputError(f"--composite-drop-first-reference applies to --dataset composite, not {args.dataset}")
        options["drop_first_reference"] = True
    if args.references is not None:
        takers = [name for name in available_benchmarks() if "references" in benchmark_options(name)]
        if args.dataset not in takers:
            raise InputError(f"--references applies to --dataset {', '.join(takers)}, not {args.dataset}")
        options["references"] = args.references
    from capeval.runtime import process_state

    shown = process_state().is_main_process  # under accelerate launch, one process prints and writes
    benchmark = load_benchmark(args.dataset, args.root, source=args.source, **options)
    metrics = builtin_metrics(args.metric, benchmark=benchmark, model=model, models=models, device=args.device,
                              batch_size=args.batch_size, progress=shown, regions=args.regions,
                              cache_dir=args.cache_dir)

    def announce(name: str) -> None:
        if shown:
            print(f"running {name} on {benchmark.name} ({len(benchmark.items)} items)", file=sys.stderr)

    result = run_benchmark(benchmark, metrics, args.image_dir, n_resamples=args.bootstrap, seed=args.seed,
                           ties=args.ties, on_metric=announce, progress=shown)
    if not shown:
        return 0
    print(markdown_report(result))
    if args.output is not None:
        for path in write_report(result, args.output):
            print(f"wrote {path}", file=sys.stderr)
    return 0

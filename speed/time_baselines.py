"""Time the full classic-baseline run on a Flickr8k benchmark: load the data, score BLEU-1, BLEU-4, METEOR, ROUGE-L
and CIDEr (pycocoevalcap 1.2, one tokenisation pass), and compute Kendall tau-b / tau-c against the human scores.

    python speed/time_baselines.py [--data-dir /path/to/flickr8k] [--benchmark flickr8k-expert|flickr8k-cf]

Needs java and pycocoevalcap 1.2.

The data folder holds ExpertAnnotations.txt, CrowdFlowerAnnotations.txt and Flickr8k.token.txt (or the clipscore
json files). The target is under 2 minutes for Flickr8k-Expert on a 2-core machine.
"""
from __future__ import annotations

import argparse
import os
import time

import scipy.stats

from _paths import FLICKR8K_DIR
from capeval.benchmarks import load_benchmark
from capeval.benchmarks.baselines import DEFAULT_BASELINES, compute_baselines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=str(FLICKR8K_DIR))
    parser.add_argument("--benchmark", default="flickr8k-expert", choices=["flickr8k-expert", "flickr8k-cf"])
    arguments = parser.parse_args()

    start = time.perf_counter()
    benchmark = load_benchmark(arguments.benchmark, arguments.data_dir)
    loaded = time.perf_counter()
    scores = compute_baselines(
        [item.candidate for item in benchmark.items], [item.references for item in benchmark.items], DEFAULT_BASELINES
    )
    scored = time.perf_counter()
    human = [item.human for item in benchmark.items]
    print(f"{benchmark.name}: {len(benchmark.items)} items")
    for name, values in scores.items():
        tau_b = 100 * scipy.stats.kendalltau(values, human, variant="b")[0]
        tau_c = 100 * scipy.stats.kendalltau(values, human, variant="c")[0]
        print(f"{name:8s} Kendall tau-b {tau_b:7.3f}  tau-c {tau_c:7.3f}")
    done = time.perf_counter()
    print(
        f"time: load {loaded - start:.1f} s, baselines {scored - loaded:.1f} s, correlations {done - scored:.1f} s, "
        f"total {done - start:.1f} s on {os.cpu_count()} CPU(s)"
    )


if __name__ == "__main__":
    main()

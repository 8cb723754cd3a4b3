"""Throughput and memory of capeval against torchmetrics' CLIPScore and reference-style loops, side by side.

    python speed/throughput.py [--quick] [--images N] [--threads T] [--repeats R] [--peers a,b] [--json-out FILE]
                               [--device cpu|cuda] [--precision auto|fp32|fp16] [--host-only]

Model: a full-size OpenAI CLIP ViT-B/32 with random weights (same cost as the real one), built once under
``--work-dir``. Images: the 1,000 Flickr8k-Expert images of ``images_224`` plus the 125 original JPEGs of
``images_original`` (1,125 files). Workloads:

* ``expert``: every kept Flickr8k-Expert (image, candidate) pair of each selected file (5.7 candidates per file on
  average; candidates repeat across images) with the image's 5 references;
* ``one-caption``: one distinct caption per file (a reference of the image, so no text repeats);
* ``stream``: ``--stream-pairs`` pairs (100,000 by default) given as generators, images cycling over the files,
  captions cycling over every Flickr8k caption.

``--host-only`` measures capeval's host pipeline alone: the one-caption workload with the model forward replaced by
a zero-cost stub, against the decode limit measured in the same run (the same decode and transform of the same
files in ``cpu_count`` DataLoader worker processes, nothing else), and the Expert workload with the same stub; the
report gives both host runs' CPU seconds in the scoring process itself (child processes excluded) per 1,000 image
files. ``--device`` runs every peer there: capeval,
torchmetrics' metric moved with ``.to(device)``, and the reference loop as ``clipscore.py`` runs it (DataLoader with
8 workers, batches of 64 images and 256 captions, ``clip``'s model in fp16 on CUDA as ``clip.load`` builds it).

Every peer runs in a fresh subprocess, so its memory is its own: ``peak memory`` is that process's peak resident set
(``VmHWM``, which starts afresh in a new program, unlike ``ru_maxrss``, inherited from the parent); for the stream,
whose target is memory, it is the larger of that and the peak, sampled every 0.5 s, of the proportional set size (PSS:
pages shared after a fork split between the processes sharing them) summed over the process and its DataLoader workers
(sampling reads every page table, about 20 ms per GB, so it runs for the stream alone). In each, the model is loaded
first (not timed), one synthetic pair that is not in the workload is scored as a warm-up (not timed), then the whole
workload is timed end to end from file paths and caption strings to scores. Wall and CPU time (all threads of the
process) are both reported: on a shared machine the CPU ratio is the steadier one.

This file is the command line and the process plumbing (one child process per peer); ``_throughput/`` holds the
workloads, the peers and the report, ``_measurement.py`` the timing and memory measurements, ``_models.py`` the
random-weight model.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from _flops import vit_image_macs
from _measurement import TreeMemorySampler, matmul_flops_per_second, peak_rss_mb
from _models import random_vit_b32_folder
from _paths import FLICKR8K_DIR, REPO_ROOT
from _throughput.context import ChildContext, PeerResult
from _throughput.peers import HOST_ONLY_PEERS, PEERS
from _throughput.report import TARGET_STREAM_PAIRS, report
from _throughput.workloads import FULL_IMAGES, expert_workload, one_caption_workload, select_files

QUICK_IMAGES = 200
QUICK_STREAM_PAIRS = 5000
RESULT_PREFIX = "THROUGHPUT-RESULT "


def parse_arguments(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_IMAGES} images and {QUICK_STREAM_PAIRS:,} streamed pairs, for development")
    parser.add_argument("--images", type=int, help=f"image files to use (default {FULL_IMAGES}, all)")
    parser.add_argument("--stream-pairs", type=int,
                        help=f"pairs in the streaming run (default {TARGET_STREAM_PAIRS:,})")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads in every peer")
    parser.add_argument("--peers", help=f"comma-separated subset of: {', '.join(PEERS)} (default all)")
    parser.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "capeval-bench",
                        help="where the random model folder is built and kept")
    parser.add_argument("--data-dir", type=Path, default=FLICKR8K_DIR,
                        help="Flickr8k folder with ExpertAnnotations.txt, Flickr8k.token.txt, images_224/, "
                             "images_original/")
    parser.add_argument("--repeats", type=int, default=1,
                        help="run every peer this many times and keep each peer's fastest run (loaded machines)")
    parser.add_argument("--json-out", type=Path, help="also write the raw results as JSON (updated after each peer)")
    parser.add_argument("--device", default="cpu", help="device of every peer (cpu, cuda, cuda:1...)")
    parser.add_argument("--precision", default="auto", choices=["auto", "fp32", "fp16", "bf16"],
                        help="capeval's precision (auto: fp32 on the CPU, fp16 on CUDA as clip.load)")
    parser.add_argument("--host-only", action="store_true",
                        help="only capeval with the model forward stubbed out and the decode limit (peers "
                             "decode-limit,capeval-host,capeval-host-expert), for the host pipeline's fraction of "
                             "the limit and its CPU seconds in the scoring process per 1,000 image files")
    parser.add_argument("--child", choices=sorted(PEERS), help=argparse.SUPPRESS)
    parser.add_argument("--cache-dir", type=Path, help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    if arguments.images is None:
        arguments.images = QUICK_IMAGES if arguments.quick else FULL_IMAGES
    if arguments.stream_pairs is None:
        arguments.stream_pairs = QUICK_STREAM_PAIRS if arguments.quick else TARGET_STREAM_PAIRS
    if not 1 <= arguments.images <= FULL_IMAGES:
        parser.error(f"--images must be between 1 and {FULL_IMAGES}")
    if arguments.repeats < 1 or arguments.stream_pairs < 1 or arguments.threads < 1:
        parser.error("--repeats, --stream-pairs and --threads must be positive")
    return arguments


# ---------------------------------------------------------------------------------------------------------------- child
def child_main(peer: str, arguments: argparse.Namespace) -> None:
    """Run one peer in this (fresh) process and print its result as one JSON line."""
    import torch

    torch.set_num_threads(arguments.threads)
    context = ChildContext(random_vit_b32_folder(arguments.work_dir),
                           select_files(arguments.data_dir, arguments.images),
                           arguments.cache_dir, arguments.stream_pairs, peer, arguments.device, arguments.precision,
                           arguments.work_dir / "scores")
    workload_name, run = PEERS[peer]
    memory = TreeMemorySampler() if workload_name == "stream" else None
    with warnings.catch_warnings(), memory or contextlib.nullcontext():
        warnings.simplefilter("ignore")
        measured = run(context)
    pairs = measured.pop("pairs", None)
    if pairs is None:
        pairs = len(one_caption_workload(context.selection) if workload_name == "one-caption"
                    else expert_workload(context.selection))
    result = PeerResult(peer=peer, workload=workload_name, pairs=pairs, peak_rss_mb=peak_rss_mb(),
                        peak_tree_pss_mb=0.0 if memory is None else memory.peak_bytes / 2**20, **measured)
    print(RESULT_PREFIX + json.dumps(asdict(result)), flush=True)


# --------------------------------------------------------------------------------------------------------------- parent
def run_child(peer: str, arguments: argparse.Namespace, cache_dir: Optional[Path]) -> PeerResult:
    """Run ``peer`` in a fresh interpreter (on-disk cache folder ``cache_dir``, if any) and parse its result."""
    command = [sys.executable, str(Path(__file__).resolve()), "--child", peer, "--images", str(arguments.images),
               "--threads", str(arguments.threads), "--work-dir", str(arguments.work_dir),
               "--data-dir", str(arguments.data_dir), "--stream-pairs", str(arguments.stream_pairs),
               "--device", arguments.device, "--precision", arguments.precision]
    if cache_dir is not None:
        command += ["--cache-dir", str(cache_dir)]
    environment = dict(os.environ, HF_HUB_OFFLINE="1", HF_EVALUATE_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    completed = subprocess.run(command, capture_output=True, text=True, env=environment, cwd=REPO_ROOT)
    lines = [line for line in completed.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if completed.returncode != 0 or not lines:
        raise RuntimeError(f"peer {peer} failed (exit {completed.returncode}):\n{completed.stderr[-4000:]}")
    return PeerResult(**json.loads(lines[-1][len(RESULT_PREFIX):]))


def _write_json(path: Path, arguments: argparse.Namespace, matmul: float, model_dir: Path,
                results: Dict[str, PeerResult]) -> None:
    path.write_text(json.dumps(
        {"arguments": {key: str(value) for key, value in vars(arguments).items()}, "matmul_flops": matmul,
         "image_macs": vit_image_macs(model_dir), "results": [asdict(result) for result in results.values()]},
        indent=2))


def _selected_peers(arguments: argparse.Namespace) -> List[str]:
    """The peers to run, in order: ``--peers``, else the host-only pair or all; exits on an unknown or misplaced one."""
    if arguments.peers is not None:
        peers = [name.strip() for name in arguments.peers.split(",")]
    else:
        peers = HOST_ONLY_PEERS if arguments.host_only else list(PEERS)
    unknown = [name for name in peers if name not in PEERS]
    if unknown:
        raise SystemExit(f"unknown peers {unknown}; choose from {list(PEERS)}")
    if "capeval-ref-warm" in peers and peers.index("capeval-ref-warm") != peers.index("capeval-ref-cold") + 1:
        raise SystemExit("capeval-ref-warm must come right after capeval-ref-cold (which fills the cache)")
    return peers


def _run_peers(peers: List[str], arguments: argparse.Namespace, matmul: float,
               model_dir: Path) -> Dict[str, PeerResult]:
    """Each peer's fastest of ``--repeats`` runs, each in a fresh process; the ``capeval-ref`` peers share an on-disk
    cache folder, emptied before each cold run. The JSON output is rewritten after every run."""
    results: Dict[str, PeerResult] = {}
    cache_dir = Path(tempfile.mkdtemp(prefix="capeval-bench-cache-"))
    try:
        for repeat in range(arguments.repeats):
            for peer in peers:
                if peer == "capeval-ref-cold":  # start from an empty on-disk cache
                    shutil.rmtree(cache_dir)
                    cache_dir.mkdir()
                started = time.perf_counter()
                result = run_child(peer, arguments, cache_dir if peer.startswith("capeval-ref") else None)
                print(f"[run {repeat + 1}] {peer}: {result.pairs} pairs in {result.seconds:.1f} s = "
                      f"{result.pairs_per_second:.2f} pairs/s, CPU {result.cpu_seconds:.2f} s, peak memory "
                      f"{result.peak_memory_mb:.0f} MB ({time.perf_counter() - started:.0f} s with start-up)",
                      flush=True)
                if peer not in results or result.seconds < results[peer].seconds:
                    results[peer] = result
                if arguments.json_out is not None:
                    _write_json(arguments.json_out, arguments, matmul, model_dir, results)
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    return results


def main(argv: Optional[Sequence[str]] = None) -> None:
    arguments = parse_arguments(argv)
    if arguments.child is not None:
        child_main(arguments.child, arguments)
        return
    peers = _selected_peers(arguments)
    model_dir = random_vit_b32_folder(arguments.work_dir)
    scores_dir = arguments.work_dir / "scores"
    shutil.rmtree(scores_dir, ignore_errors=True)
    scores_dir.mkdir(parents=True)
    matmul = matmul_flops_per_second(arguments.threads)
    print(f"fp32 matmul: {matmul / 1e9:.1f} GFLOP/s", flush=True)
    results = _run_peers(peers, arguments, matmul, model_dir)
    report(results, arguments, matmul, model_dir)


if __name__ == "__main__":
    main()

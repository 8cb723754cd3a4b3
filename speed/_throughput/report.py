"""The report of a throughput run: the table of peers, the image encoding against the machine's matmul rate, the host
pipeline against the decode limit, capeval's per-item scores against the reference loop's, and one PASS, FAIL or SKIP
line per acceptance target."""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from _flops import vit_image_macs
from _throughput.context import PeerResult
from _throughput.peers import DESCRIPTIONS

TARGET_EXPERT_RATIO = 3.0
TARGET_ONE_CAPTION_RATIO = 1.2
TARGET_WARM_CACHE_SPEEDUP = 20.0
TARGET_STREAM_PAIRS = 100_000
TARGET_STREAM_RSS_MB = 2048.0
TARGET_HOST_ONLY_FRACTION = 0.85
TARGET_GPU_DECODE_FRACTION = 0.8
TARGET_GPU_ONE_CAPTION_VS_REFERENCE = 2.5
TARGET_GPU_EXPERT_VS_REFERENCE = 3.0

BASELINES = {"expert": "capeval", "one-caption": "capeval-1cap"}
"""Workload -> the capeval peer that the table compares the other tools' peers of that workload with."""

HEADER = (f"{'workload':11s} {'peer':42s} {'pairs':>6s} {'wall s':>7s} {'CPU s':>7s} {'pairs/s':>8s} "
          f"{'peak mem MB':>11s} {'capeval x':>9s} {'x (CPU)':>7s} {'img enc':>7s} {'txt enc':>7s} "
          f"{'mean score':>10s}")
LEGEND = ("capeval x: capeval CLIP-S pairs/s on the same workload / this peer's pairs/s (x (CPU): the same per CPU "
          "second of the peer's process;\nDataLoader workers of the reference-batched peer not counted). mean score: "
          "CLIP-S for capeval and the reference-style peers, 100 * cosine (floored at 0) for torchmetrics.")


def ratio(results: Dict[str, PeerResult], fast: str, slow: str, cpu: bool = False) -> Optional[float]:
    """How many times ``fast`` outpaces ``slow`` in pairs per wall-clock (or CPU) second; None if either is missing."""
    if fast not in results or slow not in results:
        return None
    fast_result, slow_result = results[fast], results[slow]
    if cpu:
        return (fast_result.pairs / fast_result.cpu_seconds) / (slow_result.pairs / slow_result.cpu_seconds)
    return fast_result.pairs_per_second / slow_result.pairs_per_second


def decode_fraction(results: Dict[str, PeerResult], peer: str) -> Optional[float]:
    """``peer``'s images per second as a fraction of the decode limit's; None if either is missing."""
    limit = results.get("decode-limit")
    if limit is None or peer not in results:
        return None
    return results[peer].pairs_per_second / limit.pairs_per_second


def report(results: Dict[str, PeerResult], arguments: argparse.Namespace, matmul: float, model_dir: Path) -> None:
    """Print the table, the physical-limit fractions and one PASS/FAIL line per acceptance target."""
    lines = [_preamble(arguments), HEADER, "-" * len(HEADER)]
    lines += [_table_row(peer, result, results) for peer, result in results.items()]
    lines += [LEGEND, *_matmul_lines(results, matmul, model_dir, arguments.threads), *_decode_limit_lines(results)]
    lines += _main_process_lines(results)
    lines += _per_item_lines(arguments.work_dir / "scores", arguments.device)
    lines += ["\nAcceptance:", *_acceptance(results, arguments.device)]
    print("\n".join(lines))


# --------------------------------------------------------------------------------------------------------------- table
def _preamble(arguments: argparse.Namespace) -> str:
    repeats = f"best wall time of {arguments.repeats} runs per peer; " if arguments.repeats > 1 else ""
    return (f"\n{arguments.images} image files, {arguments.threads} torch thread(s), {os.cpu_count()} CPU(s); "
            f"{repeats}model loading and one warm-up pair excluded from every timing; each peer in a fresh process\n")


def _times(value: Optional[float]) -> str:
    return "" if value is None else f"{value:.2f}"


def _count(value: Optional[int]) -> str:
    return "" if value is None else str(value)


def _table_row(peer: str, result: PeerResult, results: Dict[str, PeerResult]) -> str:
    """One peer's row; the other tools' peers are compared with capeval on their workload."""
    reference = BASELINES.get(result.workload)
    compared = reference is not None and not peer.startswith(("capeval", "decode"))  # peers, not capeval's variants
    wall = ratio(results, reference, peer) if compared else None
    cpu = ratio(results, reference, peer, cpu=True) if compared else None
    return (f"{result.workload:11s} {DESCRIPTIONS[peer]:42s} {result.pairs:6d} {result.seconds:7.1f} "
            f"{result.cpu_seconds:7.1f} {result.pairs_per_second:8.2f} {result.peak_memory_mb:11.0f} "
            f"{_times(wall):>9s} {_times(cpu):>7s} {_count(result.images_encoded):>7} "
            f"{_count(result.texts_encoded):>7} {result.mean_score:10.4f}")


# ------------------------------------------------------------------------------------------------------ physical limits
def _matmul_lines(results: Dict[str, PeerResult], matmul: float, model_dir: Path, threads: int) -> List[str]:
    """The image encoding's FLOPs and the matmul rate; with the image peer, its rates as fractions of that rate."""
    macs, executed_macs = vit_image_macs(model_dir), vit_image_macs(model_dir, pooled_last_layer=True)
    images = results.get("capeval-images")
    if images is not None:  # the machine is shared: keep the best of the two matmul measurements
        matmul = max(matmul, (images.extra or {})["matmul_flops"])
    lines = [f"\nViT-B/32 image encoding: {macs / 1e9:.2f} GMACs = {2 * macs / 1e9:.2f} GFLOPs per image (full "
             f"forward; capeval executes {2 * executed_macs / 1e9:.2f}: last layer for the class token only); fp32 "
             f"matmul (2048^3, best of 10, in the parent and in the image peer): {matmul / 1e9:.1f} GFLOP/s with "
             f"{threads} thread(s)"]
    if images is not None:
        rates = {"model forward only (one batch <= 64)": (images.extra or {})["forward_images_per_second"],
                 "capeval image path end to end": images.pairs_per_second}
        lines += [_image_rate_line(what, rate, macs, executed_macs, matmul) for what, rate in rates.items()]
    return lines


def _image_rate_line(what: str, rate: float, macs: int, executed_macs: int, matmul: float) -> str:
    return (f"  {what:38s} {rate:7.2f} images/s = {rate * 2 * macs / 1e9:6.1f} model GFLOP/s = "
            f"{100 * rate * 2 * macs / matmul:5.1f}% of the matmul rate (executed: "
            f"{100 * rate * 2 * executed_macs / matmul:5.1f}%)")


def _decode_limit_lines(results: Dict[str, PeerResult]) -> List[str]:
    """The decode limit and the host-only and one-caption peers' fractions of it (nothing without the limit)."""
    limit = results.get("decode-limit")
    if limit is None:
        return []
    lines = [f"\nDecode limit: {limit.pairs_per_second:.1f} images/s ({os.cpu_count()} worker processes decoding and "
             f"transforming the {limit.pairs} files, nothing else)"]
    for peer in ("capeval-host", "capeval-1cap"):
        fraction = decode_fraction(results, peer)
        if fraction is None:
            continue
        lines.append(f"  {DESCRIPTIONS[peer]:44s} {results[peer].pairs_per_second:8.1f} images/s = "
                     f"{fraction:.3f} of the decode limit")
        if peer == "capeval-host" and limit.extra and results[peer].extra:
            lines.append(_per_cpu_line(results[peer], limit))
    return lines


def _per_cpu_line(host: PeerResult, limit: PeerResult) -> str:
    """The host-only peer against the decode limit per CPU second of the process and its workers."""
    def per_cpu(result: PeerResult) -> float:
        return result.pairs / (result.cpu_seconds + (result.extra or {})["worker_cpu_seconds"])

    return (f"  {'':44s} per CPU second (process and workers): {per_cpu(host):.1f} against "
            f"{per_cpu(limit):.1f} images = {per_cpu(host) / per_cpu(limit):.3f}")


def _main_process_lines(results: Dict[str, PeerResult]) -> List[str]:
    """The host-only peers' CPU seconds in the scoring process itself (all its threads, no child process) per 1,000
    image files, beside its child processes' (nothing without a host-only peer)."""
    lines = []
    for peer in ("capeval-host", "capeval-host-expert"):
        host = results.get(peer)
        if host is None or not host.images_encoded:
            continue
        workers = (host.extra or {}).get("worker_cpu_seconds", float("nan"))
        lines.append(f"  {host.workload:11s} {host.images_encoded} files, {host.pairs} pairs: main process "
                     f"{host.cpu_seconds:.2f} CPU s = {1000 * host.cpu_seconds / host.images_encoded:.2f} CPU s per "
                     f"1,000 image files (its living child processes, decoding and file checks: {workers:.2f} CPU s)")
    if lines:
        lines.insert(0, "\nHost pipeline, model forward stubbed: the scoring process's own CPU time (all its threads, "
                        "child processes excluded)")
    return lines


def _per_item_lines(scores_dir: Path, device: str) -> List[str]:
    """capeval's per-item CLIP-S against the reference loop's on the same pairs, where both were saved."""
    lines = []
    for mine, reference in (("capeval", "reference-batched"), ("capeval-1cap", "reference-batched-1cap")):
        paths = [scores_dir / f"{name}.npy" for name in (mine, reference)]
        if all(path.is_file() for path in paths):
            ours, theirs = (np.load(path) for path in paths)
            lines.append(f"Per-item CLIP-S, {mine} vs {reference} ({device}): {int(np.sum(ours == theirs))} of "
                         f"{len(ours)} equal, max |difference| {np.max(np.abs(ours - theirs)):.3g}")
    return lines


# ---------------------------------------------------------------------------------------------------------- acceptance
def _verdict(target: str, measured: Optional[str], passed: bool) -> str:
    """One acceptance line: SKIP when not measured (``measured`` is None), else PASS or FAIL with the measurement."""
    if measured is None:
        return f"SKIP  {target}: not measured in this run"
    return f"{'PASS' if passed else 'FAIL'}  {target}: {measured}"


def _at_least(target: str, value: Optional[float], minimum: float, shown: str) -> str:
    """The verdict that ``value`` (None: not measured), written with the format ``shown``, is at least ``minimum``."""
    return _verdict(target, None if value is None else shown.format(value), value is not None and value >= minimum)


def _speed_up(results: Dict[str, PeerResult], target: str, fast: str, slow: str, minimum: float) -> str:
    """The verdict that ``fast`` is at least ``minimum`` times ``slow`` by wall time, shown per CPU second too."""
    wall, cpu = ratio(results, fast, slow), ratio(results, fast, slow, cpu=True)
    measured = None if wall is None or cpu is None else f"{wall:.2f}x (per CPU second {cpu:.2f}x)"
    return _verdict(target, measured, wall is not None and wall >= minimum)


def _accelerator_verdicts(results: Dict[str, PeerResult], device: str) -> List[str]:
    """The targets on an accelerator: capeval against the ``clipscore.py`` loop and the decode limit."""
    return [
        _at_least(f"on {device}: capeval >= {TARGET_GPU_ONE_CAPTION_VS_REFERENCE}x the clipscore.py loop, one caption "
                  "per image", ratio(results, "capeval-1cap", "reference-batched-1cap"),
                  TARGET_GPU_ONE_CAPTION_VS_REFERENCE, "{:.2f}x"),
        _at_least(f"on {device}: capeval >= {TARGET_GPU_DECODE_FRACTION} of the decode limit, one caption per image",
                  decode_fraction(results, "capeval-1cap"), TARGET_GPU_DECODE_FRACTION, "{:.3f}"),
        _at_least(f"on {device}: capeval >= {TARGET_GPU_EXPERT_VS_REFERENCE}x the clipscore.py loop, Expert shape",
                  ratio(results, "capeval", "reference-batched"), TARGET_GPU_EXPERT_VS_REFERENCE, "{:.2f}x"),
    ]


def _stream_verdict(results: Dict[str, PeerResult]) -> str:
    """The verdict that the streamed pairs, at least the target's count, stayed under the memory target."""
    stream = results.get("capeval-stream")
    measured = None
    if stream is not None:
        measured = (f"{stream.pairs:,} pairs, peak memory {stream.peak_memory_mb:.0f} MB (process RSS "
                    f"{stream.peak_rss_mb:.0f} MB, process tree PSS {stream.peak_tree_pss_mb:.0f} MB)")
        if stream.pairs < TARGET_STREAM_PAIRS:
            measured += " (too few pairs for the target: run without --quick)"
    return _verdict(f"{TARGET_STREAM_PAIRS:,} streamed pairs with peak memory < {TARGET_STREAM_RSS_MB:.0f} MB",
                    measured, stream is not None and stream.pairs >= TARGET_STREAM_PAIRS
                    and stream.peak_memory_mb < TARGET_STREAM_RSS_MB)


def _acceptance(results: Dict[str, PeerResult], device: str) -> List[str]:
    """One PASS, FAIL or SKIP line per acceptance target (the accelerator's only off the CPU)."""
    lines = [_at_least(f"host pipeline (model forward stubbed) >= {TARGET_HOST_ONLY_FRACTION} of the decode limit",
                       decode_fraction(results, "capeval-host"), TARGET_HOST_ONLY_FRACTION, "{:.3f}")]
    if device != "cpu":
        lines += _accelerator_verdicts(results, device)
    lines.append(_speed_up(results, f"capeval CLIP-S >= {TARGET_EXPERT_RATIO}x torchmetrics CLIPScore on the Expert "
                           "shape", "capeval", "torchmetrics", TARGET_EXPERT_RATIO))
    lines.append(_speed_up(results, f"capeval CLIP-S >= {TARGET_ONE_CAPTION_RATIO}x torchmetrics CLIPScore, one "
                           "caption per image", "capeval-1cap", "torchmetrics-1cap", TARGET_ONE_CAPTION_RATIO))
    warm = ratio(results, "capeval-ref-warm", "capeval-ref-cold")
    lines.append(_at_least("warm on-disk cache re-scores the Expert workload (CLIP-S + RefCLIP-S) >= "
                           f"{TARGET_WARM_CACHE_SPEEDUP:.0f}x faster than cold", warm, TARGET_WARM_CACHE_SPEEDUP,
                           "{:.1f}x"))
    lines.append(_stream_verdict(results))
    return lines

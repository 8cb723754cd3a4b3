"""EMScore on videos: videos/s, frames/s and peak memory of capeval against the original EMScorer, on video files,
on cached features and on long videos.

    python speed/video_speed.py [--videos N] [--feature-videos M] [--references R] [--long-minutes 1,4]
                                [--long-fps F] [--threads T] [--workers W] [--peers a,b] [--prepare-only]
                                [--original-json FILE] [--json-out FILE] [--work-dir DIR]

Model: a full-size OpenAI CLIP ViT-B/32 with seeded random weights (``_models.py``; same cost as the real one), built
once under ``--work-dir``. Workloads (built once under ``--work-dir``, see ``_video_workload.py``): ``files``, copies
of a real 10 s clip, six candidates per video (VATEX-EVAL's shape) with ``--references`` references each; ``features``,
``.pt`` frame features of VATEX-EVAL's shape scored with 10 sampled frames; ``long-<m>min``, one synthesized 720p
video per length (defaults: 3 videos, 100 feature files, 9 references, 1- and 4-minute videos at 2 fps).
``--prepare-only`` builds them and writes the manifest that the original's runner reads.

capeval's peers, each in a fresh process (model loaded and a warm-up call made before the clock):

* ``files``: ``EMScore(model).score(paths, candidates, references)``, end to end from file paths and strings;
* ``features-pt``: ``EMScore(model, num_frames=10)`` on the ``.pt`` paths (read inside the call);
* ``features-memory``: the same on :class:`~capeval.VideoFeatures` read before the clock;
* ``long-<m>min``: the long video with its six candidates and references;
* ``host``: the ``files`` workload with the image forward replaced by a stub (decoding, transforms, transfers, texts
  and scoring remain);
* ``forward``: the image forward alone on a ready batch of 64 frames of the clip (best of 3), and the fp32 matmul rate
  measured right after it.

Peak memory is the process's ``VmHWM``; where the process decodes video files (``files``, ``long``, ``host``) it is
the larger of that and the peak, sampled every second, of the PSS summed over the process and its decoding workers.
Each peer also reports the seconds spent in the image forward, the text forward and the score arithmetic, and the
CPU seconds of its workers. ``--original-json`` takes the original's figures on the same manifest (made outside the
repository, speed/README.md) and adds them to the table, with the ratios, the acceptance lines and how many items'
scores agree with the original's (the coarse-grained ``cogr`` ones, and all).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from _measurement import TreeMemorySampler, matmul_flops_per_second, peak_rss_mb, timed
from _models import random_vit_b32_folder
from _paths import EMSCORE_CLIP, FLICKR8K_DIR, REPO_ROOT
from _video_workload import build

RESULT_PREFIX = "VIDEO-SPEED-RESULT "
FORWARD_BATCH = 64
TARGET_FILES_RATIO = 3.0
TARGET_FEATURES_RATIO = 1.0
TARGET_FLAT_MEMORY = 0.10
"""The longest video's peak memory may exceed the shortest's by this fraction at most."""
AGREEMENT = 1e-5
"""Per-item scores closer than this to the original's count as agreeing. Others differ where the original's zero
padding enters its maxima (capeval/functional/emscore.py), which random weights make common."""
SAMPLED_PEERS = ("files", "host")
"""Peers (besides ``long-*``) whose process tree's memory is sampled: those that decode video files."""


def parse_arguments(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--videos", type=int, default=3, help="copies of the clip in the files workload")
    parser.add_argument("--feature-videos", type=int, default=100, help="feature files in the features workload")
    parser.add_argument("--references", type=int, default=9, help="references per item (VATEX-EVAL: 1 or 9)")
    parser.add_argument("--long-minutes", default="1,4", help="lengths of the long videos, in minutes")
    parser.add_argument("--long-fps", type=int, default=2, help="frame rate of the long videos")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads in every peer")
    parser.add_argument("--device", default="cpu", help="capeval's device (cpu, cuda, ...)")
    parser.add_argument("--workers", type=int, help="capeval's decoding processes (default: capeval's own)")
    parser.add_argument("--peers", help="comma-separated subset of files, features-pt, features-memory, "
                                        "long-<m>min, host, forward (default: all; empty: only report --json-out)")
    parser.add_argument("--clip", type=Path, default=EMSCORE_CLIP, help="the real clip the files are copies of")
    parser.add_argument("--captions", type=Path, default=FLICKR8K_DIR / "Flickr8k.token.txt",
                        help="Flickr8k.token.txt, the source of the captions")
    parser.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "capeval-bench",
                        help="where the random model and the workload are built and kept")
    parser.add_argument("--prepare-only", action="store_true", help="build the workload and its manifest, then stop")
    parser.add_argument("--original-json", type=Path, help="the original EMScorer's figures on the same manifest")
    parser.add_argument("--json-out", type=Path, help="also write the results as JSON, updated after each peer; the "
                        "peers it already holds are kept and reported (so peers can be run one call at a time)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    arguments.long_minutes = [int(value) for value in arguments.long_minutes.split(",") if value]
    if min(arguments.videos, arguments.feature_videos, arguments.references, arguments.threads,
           arguments.long_fps, *arguments.long_minutes) < 1:
        parser.error("counts, lengths and threads must be positive")
    return arguments


def workload_folder(arguments: argparse.Namespace) -> Path:
    return arguments.work_dir / "video-workload"


def workload_of(manifest: Dict[str, Any], peer: str) -> Dict[str, Any]:
    """The manifest's workload that ``peer`` scores."""
    if peer.startswith("long-"):
        return manifest["long"][peer[len("long-"):]]
    return manifest["features" if peer.startswith("features") else "files"]


# ---------------------------------------------------------------------------------------------------------------- child
class Phases:
    """Seconds spent inside wrapped functions, per phase, and the frames the image forward encoded."""

    def __init__(self) -> None:
        self.seconds = {"image_forward": 0.0, "text_forward": 0.0, "scoring": 0.0}
        self.frames = 0

    def wrap(self, owner: Any, name: str, phase: str, count_rows: bool = False) -> None:
        """Replace ``owner.name`` by a version that adds its time to ``phase`` (and, with ``count_rows``, the length of
        its last positional argument to :attr:`frames`)."""
        function = getattr(owner, name)

        def timed_call(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            value = function(*args, **kwargs)
            self.seconds[phase] += time.perf_counter() - start
            if count_rows:
                self.frames += len(args[-1])
            return value

        setattr(owner, name, timed_call)

    def reset(self) -> None:
        self.seconds = dict.fromkeys(self.seconds, 0.0)
        self.frames = 0


def _scorer(arguments: argparse.Namespace, model_dir: Path, manifest: Dict[str, Any], peer: str,
            phases: Phases) -> Any:
    """A capeval ``EMScore`` for ``peer`` with its phases timed, warmed up on two items of the warm-up video (or
    features)."""
    import torch

    from capeval import EMScore, VideoFeatures
    from capeval.functional import emscore as functional
    from capeval.models.clip.loading import Backbone

    workload = workload_of(manifest, peer)
    scorer = EMScore(model=model_dir, device=arguments.device, num_frames=workload.get("num_frames"),
                     num_workers=arguments.workers)
    backbone = scorer.backbone
    if peer == "host":
        def stub(self: Backbone, pixels: torch.Tensor) -> torch.Tensor:
            return torch.ones(len(pixels), self.model.config.projection_dim)

        Backbone.encode_images = stub  # type: ignore[method-assign]
    phases.wrap(Backbone, "encode_images", "image_forward", count_rows=True)
    phases.wrap(Backbone, "encode_text_tokens", "text_forward")
    for name in ("caption", "video", "item_scores", "collect"):
        phases.wrap(functional, name, "scoring")
    warm = manifest["warm_up"]
    captions = [warm["caption"], f"{warm['caption']} again"]
    rows = np.random.default_rng(0).standard_normal((10, backbone.model.config.projection_dim)).astype(np.float32)
    video = VideoFeatures(rows) if peer.startswith("features") else warm["video"]
    scorer.score([video, video], captions, [captions[::-1], captions])
    phases.reset()
    return scorer


def _forward_only(scorer: Any, clip: str) -> Dict[str, Any]:
    """The image forward alone on a ready uint8 batch of the clip's first frames: best of 3."""
    import torch

    from capeval.video import iter_video_frames

    backbone = scorer.backbone
    frames = iter_video_frames(clip)
    batch = torch.stack([backbone.image_transform.to_uint8(next(frames), "frame") for _ in range(FORWARD_BATCH)])
    seconds, cpu_seconds, _ = min(timed(lambda: float(backbone.encode_images(batch)[0, 0])) for _ in range(3))
    return {"items": 0, "videos": 0, "frames": FORWARD_BATCH, "seconds": seconds, "cpu_seconds": cpu_seconds,
            "matmul_flops": matmul_flops_per_second(torch.get_num_threads(), repeats=5)}


def child_main(peer: str, arguments: argparse.Namespace) -> None:
    """Run one peer in this fresh process and print its result as one JSON line."""
    import torch

    from capeval.models.clip.frames import VideoFrameRows
    from capeval.video import load_video_features

    torch.set_num_threads(arguments.threads)
    manifest = json.loads((workload_folder(arguments) / "manifest.json").read_text(encoding="utf-8"))
    start = time.perf_counter()
    phases = Phases()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scorer = _scorer(arguments, random_vit_b32_folder(arguments.work_dir), manifest, peer, phases)
    load_seconds = time.perf_counter() - start
    workload = workload_of(manifest, peer)
    if peer == "forward":
        report = _forward_only(scorer, workload["videos"][0])
    else:
        videos: List[Any] = list(workload["videos"])
        if peer == "features-memory":
            loaded = {path: load_video_features(path) for path in dict.fromkeys(videos)}
            videos = [loaded[path] for path in videos]
        memory = TreeMemorySampler(interval=1.0) if peer in SAMPLED_PEERS or peer.startswith("long-") else None
        children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        with warnings.catch_warnings(), memory or contextlib.nullcontext():
            warnings.simplefilter("ignore")
            seconds, cpu_seconds, result = timed(
                lambda: scorer.score(videos, workload["candidates"], workload["references"]))
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        report = {"items": len(videos), "videos": len(set(workload["videos"])), "frames": workload["frames"],
                  "seconds": seconds, "cpu_seconds": cpu_seconds,
                  "worker_cpu_seconds": (children.ru_utime + children.ru_stime
                                         - children_before.ru_utime - children_before.ru_stime),
                  "peak_tree_pss_mb": 0.0 if memory is None else memory.peak_bytes / 2**20,
                  "scores": {name: value for name, value in result.items() if isinstance(value, list)}}
    producer = scorer.engine.producers[VideoFrameRows.kind]
    print(RESULT_PREFIX + json.dumps({
        "peer": peer, **report, "load_seconds": load_seconds, "peak_rss_mb": peak_rss_mb(),
        "threads": torch.get_num_threads(), "workers": producer.num_workers, "phases": phases.seconds,
        "frames_encoded": phases.frames}), flush=True)


# --------------------------------------------------------------------------------------------------------------- parent
def run_child(peer: str, arguments: argparse.Namespace) -> Dict[str, Any]:
    """Run ``peer`` in a fresh interpreter and parse its result, with the load average and clock time at its start."""
    command = [sys.executable, str(Path(__file__).resolve()), "--child", peer, "--threads", str(arguments.threads),
               "--work-dir", str(arguments.work_dir), "--device", arguments.device]
    if arguments.workers is not None:
        command += ["--workers", str(arguments.workers)]
    environment = dict(os.environ, HF_HUB_OFFLINE="1", HF_EVALUATE_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    load, started = os.getloadavg()[0], time.strftime("%H:%M:%S")
    completed = subprocess.run(command, capture_output=True, text=True, env=environment, cwd=REPO_ROOT)
    lines = [line for line in completed.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if completed.returncode != 0 or not lines:
        raise RuntimeError(f"peer {peer} failed (exit {completed.returncode}):\n{completed.stderr[-4000:]}")
    return {**json.loads(lines[-1][len(RESULT_PREFIX):]), "load_average_at_start": load, "started": started}


def peak_memory_mb(result: Dict[str, Any]) -> float:
    return max(result["peak_rss_mb"], result.get("peak_tree_pss_mb", 0.0))


def total_cpu_seconds(result: Dict[str, Any]) -> float:
    """The process's CPU seconds and its child processes' (capeval's decoding workers, the original's IDF pool)."""
    return result["cpu_seconds"] + result.get("worker_cpu_seconds", result.get("children_cpu_seconds", 0.0))


def _row(workload: str, tool: str, result: Dict[str, Any]) -> str:
    seconds = result["seconds"]
    videos = result["videos"] / seconds if result["videos"] else float("nan")
    return (f"{workload:16s} {tool:9s} {result['items']:>6,d} {result['videos']:>6,d} {result['frames']:>7,d} "
            f"{seconds:>8.1f} {total_cpu_seconds(result):>8.1f} {videos:>8.3f} {result['frames'] / seconds:>8.1f} "
            f"{peak_memory_mb(result):>8,.0f} {result.get('load_average_at_start', float('nan')):>5.1f}")


HEADER = (f"{'workload':16s} {'tool':9s} {'items':>6s} {'videos':>6s} {'frames':>7s} {'wall s':>8s} {'CPU s':>8s} "
          f"{'videos/s':>8s} {'frames/s':>8s} {'peak MB':>8s} {'load':>5s}")


def _original_scores(result: Dict[str, Any]) -> Dict[str, List[float]]:
    """The original's per-item scores under capeval's result names (``emscore_video_full_fs``)."""
    from capeval.scorers.emscore import result_name

    return {f"{result_name(view, key)}s": values for view, by_key in result["scores"].items()
            for key, values in by_key.items()}


def score_agreement(ours: Dict[str, Any], theirs: Dict[str, Any]) -> str:
    """How many items have their coarse-grained scores (``cogr``: no padding involved), and all their scores, within
    :data:`AGREEMENT` of the original's, with the largest differences."""
    original = _original_scores(theirs)
    parts = []
    for label, suffix in (("cogr", "_cogrs"), ("all scores", "s")):
        names = [name for name in ours["scores"] if name in original and name.endswith(suffix)]
        if not names:
            continue
        differences = np.stack([np.abs(np.asarray(ours["scores"][name]) - np.asarray(original[name]))
                                for name in names]).max(axis=0)
        parts.append(f"{label} {int(np.sum(differences <= AGREEMENT))} of {len(differences)} items within "
                     f"{AGREEMENT:g} (largest difference {differences.max():.1e})")
    return "; ".join(parts) or "no shared scores"


def _verdict(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


def report(results: Dict[str, Dict[str, Any]], original: Optional[Dict[str, Any]],
           arguments: argparse.Namespace) -> List[str]:
    """The table, the ratios, the per-item differences, the phases and one line per acceptance target."""
    theirs: Dict[str, Dict[str, Any]] = {} if original is None else original["peers"]
    settings = sorted({(result["threads"], result["workers"]) for result in results.values()})
    lines = [f"{os.cpu_count()} CPUs; capeval (torch threads, decoding workers): {settings}", HEADER, "-" * len(HEADER)]
    for peer, result in results.items():
        if peer in ("host", "forward"):
            continue
        lines.append(_row(peer, "capeval", result))
        if peer in theirs:
            lines.append(_row(peer, "original", {**theirs[peer], "frames": result["frames"]}))
    for peer, label in (("host", "capeval, image forward stubbed"), ("forward", "capeval, image forward alone")):
        if peer in results:
            result = results[peer]
            lines.append(f"{peer:16s} {label}: {result['frames']:,d} frames in {result['seconds']:.2f} s = "
                         f"{result['frames'] / result['seconds']:.1f} frames/s")
    lines.append("")
    for peer, result in results.items():
        if peer not in theirs:
            continue
        other = theirs[peer]
        lines.append(f"{peer}: capeval {other['seconds'] / result['seconds']:.2f}x the original by wall time, "
                     f"{total_cpu_seconds(other) / total_cpu_seconds(result):.2f}x per CPU second; peak memory "
                     f"{peak_memory_mb(result):,.0f} MB against {peak_memory_mb(other):,.0f} MB "
                     f"({peak_memory_mb(other) / peak_memory_mb(result):.2f}x less); scores: "
                     f"{score_agreement(result, other)}")
    lines += ["", "Phases (seconds inside the image forward, the text forward and the score arithmetic; the rest is "
                  "validation, decoding waits and transfers; workers' CPU seconds separately):"]
    for peer, result in results.items():
        if peer != "forward":
            seconds = result["phases"]
            lines.append(f"  capeval  {peer:16s} " + ", ".join(f"{name} {value:.1f}" for name, value in seconds.items())
                         + f", other {result['seconds'] - sum(seconds.values()):.1f} of {result['seconds']:.1f} s; "
                           f"workers {result.get('worker_cpu_seconds', 0.0):.1f} CPU s")
        if peer in theirs:
            other = theirs[peer]
            lines.append(f"  original {peer:16s} encode_image {other['encode_image_s']:.1f}, encode_text "
                         f"{other['encode_text_s']:.1f}, other (decoding, preprocessing, scoring) "
                         f"{other['seconds'] - other['encode_image_s'] - other['encode_text_s']:.1f} of "
                         f"{other['seconds']:.1f} s")
    return lines + [""] + _acceptance(results, theirs)


def _acceptance(results: Dict[str, Dict[str, Any]], theirs: Dict[str, Dict[str, Any]]) -> List[str]:
    lines = []
    if "files" in results and "files" in theirs:
        ratio = theirs["files"]["seconds"] / results["files"]["seconds"]
        lines.append(f"{_verdict(ratio >= TARGET_FILES_RATIO)}: video files, capeval {ratio:.2f}x the original "
                     f"(target >= {TARGET_FILES_RATIO:g}x)")
    for peer in ("features-pt", "features-memory"):
        if peer in results and peer in theirs:
            ratio = theirs[peer]["seconds"] / results[peer]["seconds"]
            lines.append(f"{_verdict(ratio >= TARGET_FEATURES_RATIO)}: {peer}, capeval {ratio:.2f}x the original "
                         "(target: never slower)")
    long_peers = sorted((result["frames"], peak_memory_mb(result), peer) for peer, result in results.items()
                        if peer.startswith("long-"))
    if len(long_peers) > 1:
        (short_frames, short_mb, short), (long_frames, long_mb, longest) = long_peers[0], long_peers[-1]
        growth = long_mb / short_mb - 1
        line = (f"{_verdict(growth <= TARGET_FLAT_MEMORY)}: memory flat in video length, capeval {short_mb:,.0f} MB "
                f"({short}, {short_frames:,d} frames) -> {long_mb:,.0f} MB ({longest}, {long_frames:,d} frames), "
                f"{100 * growth:+.1f}% (target <= {100 * TARGET_FLAT_MEMORY:.0f}%)")
        if short in theirs and longest in theirs:
            line += (f"; the original {peak_memory_mb(theirs[short]):,.0f} MB -> "
                     f"{peak_memory_mb(theirs[longest]):,.0f} MB")
        lines.append(line)
    return lines


def _selected_peers(arguments: argparse.Namespace, manifest: Dict[str, Any]) -> List[str]:
    known = ["files", "features-pt", "features-memory", *(f"long-{name}" for name in manifest["long"]), "host",
             "forward"]
    if arguments.peers is None:
        return known
    peers = [name.strip() for name in arguments.peers.split(",") if name.strip()]
    unknown = [name for name in peers if name not in known]
    if unknown:
        raise SystemExit(f"unknown peers {unknown}; choose from {known}")
    return peers


def main(argv: Optional[Sequence[str]] = None) -> None:
    arguments = parse_arguments(argv)
    if arguments.child is not None:
        child_main(arguments.child, arguments)
        return
    random_vit_b32_folder(arguments.work_dir)
    manifest = build(workload_folder(arguments), arguments.clip, arguments.captions, arguments.videos,
                     arguments.feature_videos, arguments.references, arguments.long_minutes, arguments.long_fps)
    print(f"workload and manifest: {workload_folder(arguments) / 'manifest.json'}", flush=True)
    if arguments.prepare_only:
        return
    original = None
    if arguments.original_json is not None:
        original = json.loads(arguments.original_json.read_text(encoding="utf-8"))
    results: Dict[str, Dict[str, Any]] = {}
    if arguments.json_out is not None and arguments.json_out.is_file():  # peers measured by earlier calls
        results = json.loads(arguments.json_out.read_text(encoding="utf-8"))["capeval"]
    for peer in _selected_peers(arguments, manifest):
        results[peer] = run_child(peer, arguments)
        result = results[peer]
        print(f"{peer}: {result['frames']:,d} frames in {result['seconds']:.1f} s, CPU {total_cpu_seconds(result):.1f} "
              f"s, peak memory {peak_memory_mb(result):,.0f} MB (load {result['load_average_at_start']:.1f})",
              flush=True)
        if arguments.json_out is not None:
            arguments.json_out.write_text(json.dumps({"arguments": {key: str(value) for key, value in
                                                                    vars(arguments).items()},
                                                      "capeval": results, "original": original}, indent=1))
    print("\n".join(report(results, original, arguments)))


if __name__ == "__main__":
    main()

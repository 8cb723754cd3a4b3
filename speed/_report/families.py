"""Each family's measurements for the report: the per-family speed script run in its own processes (through its
``--json-out``), at the benchmark size and at a smaller one for the memory check, and the rows made of its JSON.

A :class:`Row` is one tool on one workload; a :class:`FamilyResult` holds capeval's row, its peers' rows, the two
peak memories of the memory check and the model forwards' FLOP rates.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from _paths import REPO_ROOT
from _report.originals import Originals

SPEED = REPO_ROOT / "speed"
MEASURED = "measured in this run"


@dataclass
class Row:
    """One tool's run on one workload."""

    tool: str
    workload: str
    items: int
    seconds: float
    peak_mb: Optional[float]
    source: str = MEASURED
    cpu_seconds: Optional[float] = None
    comparable: bool = True
    """Whether the row's workload is the capeval row's (a figure file of another workload is shown without ratio)."""

    @property
    def items_per_second(self) -> float:
        return self.items / self.seconds


@dataclass(frozen=True)
class MemoryCheck:
    """The two runs of the memory-flat check: each run's label and peak MB, and the MB of rows that the scorer's
    engine holds in its memory caches at the end of the run (their largest: they only grow, up to a fixed bound per
    row kind, ``EmbeddingEngine.memory_cache_nbytes``), ``None`` where the script does not report them."""

    small: str
    small_mb: float
    large: str
    large_mb: float
    small_cache_mb: Optional[float] = None
    large_cache_mb: Optional[float] = None

    def net_mb(self) -> Optional[Tuple[float, float]]:
        """Both runs' peaks less their cached rows, or ``None`` unless both runs report them."""
        if self.small_cache_mb is None or self.large_cache_mb is None:
            return None
        return self.small_mb - self.small_cache_mb, self.large_mb - self.large_cache_mb

    def growth(self) -> float:
        """The larger run's peak over the smaller run's, less one; net of the memory caches where both runs report
        them (a cache bounded whatever the number of items fills up over the first items)."""
        small, large = self.net_mb() or (self.small_mb, self.large_mb)
        return large / small - 1


@dataclass
class FamilyResult:
    """A family's rows and checks."""

    family: str
    capeval: Row
    peers: List[Row] = field(default_factory=list)
    memory: Optional[MemoryCheck] = None
    forwards: Dict[str, Tuple[float, float]] = field(default_factory=dict)
    """Forward name -> (model FLOPs per second of that forward alone on a ready batch, the fp32 matmul rate measured
    right after it in the same process)."""
    notes: List[str] = field(default_factory=list)
    memory_in: str = "items"
    """What the memory check grows: items, or for EMScore video length."""


@dataclass(frozen=True)
class Settings:
    """What every family's scripts get from the report's command line."""

    device: str
    threads: int
    quick: bool
    work_dir: Path
    data_dir: Path
    clip: Path
    nltk_data: Optional[Path]
    out_dir: Path
    originals: Optional[Originals]
    sizes: Mapping[str, int] = field(default_factory=dict)
    """Family name -> its benchmark size from ``--images FAMILY=N`` (image files for CLIP-S, Expert images for the
    others), replacing the full and the ``--quick`` size."""


def run_script(script: str, arguments: List[str], json_out: Path) -> Dict[str, Any]:
    """``python speed/<script> ARGS --json-out FILE`` in a fresh process; its JSON. The command (with the load
    average at its start) and then its duration are printed, so that a long report shows progress; the script's own
    output is shown only when it fails (the end of its standard error)."""
    command = [sys.executable, str(SPEED / script), *arguments, "--json-out", str(json_out)]
    environment = dict(os.environ, HF_HUB_OFFLINE="1", HF_EVALUATE_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    started = time.perf_counter()
    print(f"$ {script} {' '.join(arguments)}  (load {os.getloadavg()[0]:.1f})", flush=True)
    completed = subprocess.run(command, capture_output=True, text=True, env=environment, cwd=REPO_ROOT)
    if completed.returncode != 0 or not json_out.is_file():
        raise RuntimeError(f"{script} failed (exit {completed.returncode}):\n{completed.stderr[-4000:]}")
    print(f"  done in {time.perf_counter() - started:.0f} s", flush=True)
    return json.loads(json_out.read_text(encoding="utf-8"))


SIZED_FAMILIES = ("clip-s", "tigerscore", "vilbertscore", "bridge", "polos")
"""The families whose workload size ``--images FAMILY=N`` sets (EMScore's VATEX-EVAL workload has its own sizes)."""


def _sizes(settings: Settings, family: str, quick: Tuple[int, int], full: Tuple[int, int]) -> Tuple[int, int]:
    """(benchmark size, smaller size for the memory check): ``--images FAMILY=N`` gives (N, N // 2), else the quick
    or the full sizes."""
    if family in settings.sizes:
        size = settings.sizes[family]
        return size, max(1, size // 2)
    return quick if settings.quick else full


def _common(settings: Settings) -> List[str]:
    return ["--device", settings.device, "--threads", str(settings.threads)]


def _figure(settings: Settings, family: str) -> Optional[Dict[str, Any]]:
    """The original's figure of ``family`` from ``--originals``, if given."""
    return settings.originals.figure(family) if settings.originals is not None else None


# ---------------------------------------------------------------------------------------------------------- CLIP-S
def clip_s(settings: Settings) -> List[FamilyResult]:
    """CLIP-S (and PAC-S: the same code path, a ViT-B/32 of the same shape) against torchmetrics and the
    ``clipscore.py`` loop, Expert shape, with the image forward alone against the matmul peak."""
    from _flops import vit_image_macs
    from _models import random_vit_b32_folder

    size, small = _sizes(settings, "clip-s", (40, 20), (1125, 560))
    common = [*_common(settings), "--work-dir", str(settings.work_dir), "--data-dir", str(settings.data_dir)]
    run = run_script("throughput.py", [*common, "--images", str(size), "--peers",
                                       "capeval,torchmetrics,reference-batched,capeval-images"],
                     settings.out_dir / "clip-s.json")
    smaller = run_script("throughput.py", [*common, "--images", str(small), "--peers", "capeval"],
                         settings.out_dir / "clip-s-small.json")
    results = {result["peer"]: result for result in run["results"]}
    small_result = smaller["results"][0]

    def row(peer: str, tool: str) -> Row:
        result = results[peer]
        return Row(tool, f"Expert, {size:,} files", result["pairs"], result["seconds"],
                   max(result["peak_rss_mb"], result["peak_tree_pss_mb"]), cpu_seconds=result["cpu_seconds"])

    macs = vit_image_macs(random_vit_b32_folder(settings.work_dir))
    extra = results["capeval-images"]["extra"]
    forward = (extra["forward_images_per_second"] * 2 * macs, extra["matmul_flops"])
    return [FamilyResult(
        "CLIP-S / PAC-S", row("capeval", "capeval CLIP-S"),
        [row("torchmetrics", "torchmetrics CLIPScore"), row("reference-batched", "clipscore.py loop")],
        MemoryCheck(f"{small_result['pairs']:,} pairs", small_result["peak_rss_mb"],
                    f"{results['capeval']['pairs']:,} pairs", results["capeval"]["peak_rss_mb"]),
        {"CLIP ViT-B/32 image forward (batch 64)": forward},
        ["PAC-S runs this code path with PAC-S-format weights of the same ViT-B/32 shape: the same cost, so the "
         "CLIP-S row stands for it."])]


# ----------------------------------------------------------------------------------------------- region families
def _original_row(settings: Settings, family: str, same_workload: Callable[[Dict[str, Any]], bool]) -> List[Row]:
    """The original's row from the figure file, if it has one (without ratio unless ``same_workload(figure)``)."""
    figure = _figure(settings, family)
    if figure is None:
        return []
    return [Row(f"original ({figure['tool']})", f"Expert, {figure['images']:,} images", figure["items"],
                figure["seconds"], figure.get("peak_rss_mb"), settings.originals.provenance(family),
                figure.get("cpu_seconds"), comparable=same_workload(figure))]


def _expert_family(settings: Settings, family: str, label: str, script: str, sizes: Tuple[int, int],
                   extra: List[str], forwards: Callable[[Dict[str, Any]], Dict[str, Tuple[float, float]]]
                   ) -> FamilyResult:
    """A family timed by a script of the ``_expert.py`` shape: the benchmark size with ``--forward``, the smaller
    size for the memory check, and the original's figure from the file."""
    size, small = sizes
    common = [*_common(settings), "--work-dir", str(settings.work_dir), *extra]
    run = run_script(script, [*common, "--images", str(size), "--forward"], settings.out_dir / f"{family}.json")
    smaller = run_script(script, [*common, "--images", str(small)], settings.out_dir / f"{family}-small.json")
    capeval = Row(f"capeval {label}", f"Expert, {run['images']:,} images", run["items"], run["seconds"],
                  run["peak_rss_mb"], cpu_seconds=run["cpu_seconds"])
    same = (run["images"], run["items"])
    return FamilyResult(label, capeval,
                        _original_row(settings, family, lambda figure: (figure["images"], figure["items"]) == same),
                        MemoryCheck(f"{smaller['items']:,} items", smaller["peak_rss_mb"], f"{run['items']:,} items",
                                    run["peak_rss_mb"], smaller.get("memory_cache_mb"), run.get("memory_cache_mb")),
                        forwards(run["forward"]))


def _rates(named: Dict[str, str]) -> Callable[[Dict[str, Any]], Dict[str, Tuple[float, float]]]:
    """Forward rates and adjacent matmul rates picked from a script's ``forward`` JSON: label -> key."""
    return lambda forward: {label: (forward[key]["flops_per_second"], forward[key]["matmul_flops_per_second"])
                            for label, key in named.items()}


def tigerscore(settings: Settings) -> List[FamilyResult]:
    extra = ["--data-dir", str(settings.data_dir)]
    if settings.nltk_data is not None:
        extra += ["--nltk-data", str(settings.nltk_data)]
    result = _expert_family(settings, "tigerscore", "TIGEr", "tiger_speed.py",
                            _sizes(settings, "tigerscore", (100, 50), (1000, 500)), extra,
                            _rates({"SCAN bidirectional GRU (batch 256)": "gru",
                                    "SCAN region projection (batch 64)": "region_projection",
                                    "TIGEr grounding, float64 NumPy": "grounding_float64"}))
    return [result]


def vilbertscore(settings: Settings) -> List[FamilyResult]:
    extra = ["--data-dir", str(settings.data_dir), *(["--batch-size", "16"] if settings.quick else [])]
    return [_expert_family(settings, "vilbertscore", "ViLBERTScore", "vilbertscore_speed.py",
                          _sizes(settings, "vilbertscore", (4, 2), (1000, 500)), extra,
                          _rates({f"ViLBERT trunk (batch {16 if settings.quick else 64})": "trunk"}))]


def bridge(settings: Settings) -> List[FamilyResult]:
    extra = ["--data-dir", str(settings.data_dir)]
    if settings.nltk_data is not None:
        extra += ["--nltk-data", str(settings.nltk_data)]
    result = _expert_family(settings, "bridge", "BRIDGE", "bridge_speed.py",
                            _sizes(settings, "bridge", (2, 1), (1000, 500)), extra,
                            _rates({"BRIDGE pseudo-caption forward (grid, mapper, text tower)": "pseudo_captions"}))
    run = json.loads((settings.out_dir / "bridge.json").read_text(encoding="utf-8"))
    result.notes.append(f"BRIDGE: {run['captioning_seconds']:.1f} of {run['seconds']:.1f} s in BLIP-large "
                        f"captioning (random weights: captions run to max_length); tagger {run['tagger']}.")
    return [result]


# --------------------------------------------------------------------------------------------------------- EMScore
def _same_manifest_workload(ours: Dict[str, Any], theirs: Dict[str, Any]) -> bool:
    """Whether the original's figure of a peer was made on this run's workload: the same number of manifest items and
    of distinct videos (or feature files)."""
    return (theirs["items"], theirs["videos"]) == (ours["items"], ours["videos"])


def emscore(settings: Settings) -> List[FamilyResult]:
    """EMScore on the VATEX-EVAL-shaped workload of video_speed.py (video files; cached features), against the
    original EMScorer's figures on the same manifest; memory flat in video length from its two long videos."""
    from _flops import vit_image_macs
    from _models import random_vit_b32_folder
    from video_speed import score_agreement

    workload = (["--videos", "1", "--feature-videos", "20", "--long-minutes", "1,2", "--long-fps", "1"]
                if settings.quick else [])
    arguments = ["--threads", str(settings.threads), "--work-dir", str(settings.work_dir), "--clip",
                 str(settings.clip), "--captions", str(settings.data_dir / "Flickr8k.token.txt"), *workload]
    figure = _figure(settings, "emscore")
    if figure is not None:
        original_json = settings.out_dir / "emscore-original.json"
        original_json.write_text(json.dumps(figure), encoding="utf-8")
        arguments += ["--original-json", str(original_json)]
    longs = "long-1min,long-2min" if settings.quick else "long-1min,long-4min"
    run = run_script("video_speed.py", [*arguments, "--peers", f"files,features-pt,{longs},forward"],
                     settings.out_dir / "emscore.json")["capeval"]

    def row(peer: str, tool: str, result: Dict[str, Any], source: str = MEASURED, comparable: bool = True) -> Row:
        cpu = result["cpu_seconds"] + result.get("worker_cpu_seconds", result.get("children_cpu_seconds", 0.0))
        return Row(tool, f"VATEX-EVAL shape, {peer}, videos: {result['videos']:,}", result["items"],
                   result["seconds"], max(result["peak_rss_mb"], result.get("peak_tree_pss_mb", 0.0)), source, cpu,
                   comparable)

    result = FamilyResult("EMScore / video PAC-S", row("files", "capeval EMScore", run["files"]))
    features = FamilyResult("EMScore, cached features", row("features-pt", "capeval EMScore", run["features-pt"]))
    theirs = figure["peers"] if figure is not None else {}
    source = (f"read from {settings.originals.path.name} (dated {figure.get('date', '?')}, machine: "
              f"{figure.get('machine', '?')})" if figure is not None else MEASURED)
    for peer, family in (("files", result), ("features-pt", features)):
        if peer in theirs:
            same = _same_manifest_workload(run[peer], theirs[peer])
            family.peers.append(row(peer, "original EMScorer", theirs[peer], source, same))
            if same:
                family.notes.append(f"EMScore {peer}, per-item scores against the original's: "
                                    f"{score_agreement(run[peer], theirs[peer])}.")
    short, long = (run[name] for name in longs.split(","))
    result.memory_in = "video length"
    result.memory = MemoryCheck(
        f"{short['frames']:,}-frame video", max(short["peak_rss_mb"], short["peak_tree_pss_mb"]),
        f"{long['frames']:,}-frame video", max(long["peak_rss_mb"], long["peak_tree_pss_mb"]))
    forward = run["forward"]
    macs = vit_image_macs(random_vit_b32_folder(settings.work_dir))
    result.forwards["CLIP ViT-B/32 frame forward (batch 64)"] = (forward["frames"] / forward["seconds"] * 2 * macs,
                                                                forward["matmul_flops"])
    result.notes.append("EMScore / video PAC-S: video PAC-S is EMScore on the PAC-S backbone (same code path).")
    return [result, features]


# ----------------------------------------------------------------------------------------------------------- Polos
def polos(settings: Settings) -> List[FamilyResult]:
    """Polos from image files on the Expert shape (polos_speed.py) against the polos wheel's ``predict`` at its
    default batch size (the runner's figure, compared only on the very workload of the run: its ``workload_id``),
    with the per-item agreement of the scores; the memory check at half the images."""
    from polos_speed import score_agreement

    size, small = _sizes(settings, "polos", (10, 5), (1000, 500))
    common = [*_common(settings), "--work-dir", str(settings.work_dir), "--data-dir", str(settings.data_dir)]
    run = run_script("polos_speed.py", [*common, "--images", str(size)], settings.out_dir / "polos.json")["capeval"]
    smaller = run_script("polos_speed.py", [*common, "--images", str(small)],
                         settings.out_dir / "polos-small.json")["capeval"]
    capeval = Row("capeval Polos", f"Expert, {run['images']:,} images", run["items"], run["seconds"],
                  run["peak_rss_mb"], cpu_seconds=run["cpu_seconds"] + run["worker_cpu_seconds"])
    result = FamilyResult(
        "Polos", capeval,
        _original_row(settings, "polos", lambda figure: figure["workload_id"] == run["workload_id"]),
        MemoryCheck(f"{smaller['items']:,} items", smaller["peak_rss_mb"], f"{run['items']:,} items",
                    run["peak_rss_mb"], smaller.get("memory_cache_mb"), run.get("memory_cache_mb")))
    if result.peers and result.peers[0].comparable:
        result.notes += [f"Polos: {line}." for line in score_agreement(run["scores"], _figure(settings, "polos"))]
    return [result]


FAMILIES: Dict[str, Callable[[Settings], List[FamilyResult]]] = {
    "clip-s": clip_s, "tigerscore": tigerscore, "vilbertscore": vilbertscore, "bridge": bridge, "emscore": emscore,
    "polos": polos}
"""Family name (``--families``) -> its measurement, in run order."""

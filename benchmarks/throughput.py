"""Throughput and memory of capeval against torchmetrics' CLIPScore and reference-style loops, side by side.

    python benchmarks/throughput.py [--quick] [--images N] [--threads T] [--repeats R] [--peers a,b] [--json-out FILE]
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
files in ``cpu_count`` DataLoader worker processes, nothing else). ``--device`` runs every peer there: capeval,
torchmetrics' metric moved with ``.to(device)``, and the reference loop as ``clipscore.py`` runs it (DataLoader with
8 workers, batches of 64 images and 256 captions, ``clip``'s model in fp16 on CUDA as ``clip.load`` builds it).

Every peer runs in a fresh subprocess, so its memory is its own: ``peak memory`` is that process's peak resident set
(``ru_maxrss``); for the stream, whose target is memory, it is the larger of that and the peak, sampled every 0.5 s,
of the proportional set size (PSS: pages shared after a fork split between the processes sharing them) summed over
the process and its DataLoader workers (sampling reads every page table, about 20 ms per GB, so it runs for the
stream alone). In each, the model is loaded first (not timed), one synthetic pair that is not in the workload is scored as a warm-up
(not timed), then the whole workload is timed end to end from file paths and caption strings to scores. Wall and
CPU time (all threads of the process) are both reported: on a shared machine the CPU ratio is the steadier one.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
from PIL import Image

from _models import REPO_ROOT, random_vit_b32_folder, random_vit_b32_openai
from capeval import CLIPScore
from capeval.benchmarks import load_benchmark
from capeval.functional.clipscore import clip_s
from capeval.inputs import validate_image
from capeval.models.clip.encoders import DECODE_GROUP, PREFETCH_GROUPS
from capeval.models.clip.loading import Backbone
from capeval.models.clip.preprocessing import ImageTransform

FULL_IMAGES = 1125
QUICK_IMAGES = 200
QUICK_STREAM_PAIRS = 5000
ORIGINALS_SHARE = 125 / 1125
WARM_UP_CAPTION = "a warm-up caption that is not in any workload"
RESULT_PREFIX = "THROUGHPUT-RESULT "

TARGET_EXPERT_RATIO = 3.0
TARGET_ONE_CAPTION_RATIO = 1.2
TARGET_WARM_CACHE_SPEEDUP = 20.0
TARGET_STREAM_PAIRS = 100_000
TARGET_STREAM_RSS_MB = 2048.0
TARGET_HOST_ONLY_FRACTION = 0.85
TARGET_GPU_DECODE_FRACTION = 0.8
TARGET_GPU_ONE_CAPTION_VS_REFERENCE = 2.5
TARGET_GPU_EXPERT_VS_REFERENCE = 3.0


# ----------------------------------------------------------------------------------------------------------- workloads
@dataclass(frozen=True)
class Workload:
    """Pairs to score: one image path, one candidate and the image's references per pair."""

    images: Tuple[str, ...]
    candidates: Tuple[str, ...]
    references: Tuple[Tuple[str, ...], ...]

    def __len__(self) -> int:
        return len(self.candidates)


@dataclass(frozen=True)
class Flickr8kFiles:
    """The selected image files and, per Flickr8k image name, its Expert candidates and its references."""

    files: Tuple[Tuple[str, Path], ...]
    candidates: Dict[str, Tuple[str, ...]]
    references: Dict[str, Tuple[str, ...]]
    all_captions: Tuple[str, ...]


def select_files(data_dir: Path, n_images: int) -> Flickr8kFiles:
    """The first ``n_images`` files: ``images_224`` files in Expert order, then originals in the same share as in
    the full set (125 of 1,125)."""
    benchmark = load_benchmark("flickr8k-expert", data_dir)
    candidates: Dict[str, List[str]] = {}
    references: Dict[str, Tuple[str, ...]] = {}
    for item in benchmark.items:
        image_candidates = candidates.setdefault(item.image, [])
        if item.candidate not in image_candidates:  # three ratings per pair: keep the pair once
            image_candidates.append(item.candidate)
        references[item.image] = item.references
    names = list(candidates)
    originals = [name for name in names if (data_dir / "images_original" / name).is_file()]
    n_originals = min(len(originals), round(n_images * ORIGINALS_SHARE))
    n_squashed = min(len(names), n_images - n_originals)
    files = [(name, data_dir / "images_224" / name) for name in names[:n_squashed]]
    files += [(name, data_dir / "images_original" / name) for name in originals[:n_originals]]
    all_captions = tuple(line.split("\t", 1)[1].strip()
                         for line in (data_dir / "Flickr8k.token.txt").read_text().splitlines() if "\t" in line)
    return Flickr8kFiles(tuple(files), {name: tuple(texts) for name, texts in candidates.items()}, references,
                         all_captions)


def expert_workload(selection: Flickr8kFiles) -> Workload:
    """Every Expert pair of every selected file, with the image's references."""
    images, candidates, references = [], [], []
    for name, path in selection.files:
        for candidate in selection.candidates[name]:
            images.append(str(path))
            candidates.append(candidate)
            references.append(selection.references[name])
    return Workload(tuple(images), tuple(candidates), tuple(references))


def one_caption_workload(selection: Flickr8kFiles) -> Workload:
    """One pair per file; the caption is a reference of the image (the second one for originals), so all differ."""
    images, candidates, references = [], [], []
    for name, path in selection.files:
        refs = selection.references[name]
        images.append(str(path))
        candidates.append(refs[1] if path.parent.name == "images_original" else refs[0])
        references.append(refs)
    return Workload(tuple(images), tuple(candidates), tuple(references))


def cycled(values: Sequence[Any], count: int) -> Iterator[Any]:
    """``count`` values cycling over ``values``, produced lazily."""
    for index in range(count):
        yield values[index % len(values)]


def warm_up_image() -> Image.Image:
    """A seeded noise image that is in no workload."""
    pixels = np.random.default_rng(0).integers(0, 256, size=(224, 224, 3), dtype=np.uint8)
    return Image.fromarray(pixels, mode="RGB")


# ---------------------------------------------------------------------------------------------------------------- peers
@dataclass
class PeerResult:
    """What one peer run measured."""

    peer: str
    workload: str
    pairs: int
    seconds: float
    cpu_seconds: float
    load_seconds: float
    peak_rss_mb: float
    mean_score: float
    peak_tree_pss_mb: float = 0.0
    images_encoded: Optional[int] = None
    texts_encoded: Optional[int] = None
    extra: Optional[Dict[str, float]] = None

    @property
    def pairs_per_second(self) -> float:
        return self.pairs / self.seconds

    @property
    def peak_memory_mb(self) -> float:
        """The process's peak RSS or its process tree's peak sampled PSS, whichever is larger."""
        return max(self.peak_rss_mb, self.peak_tree_pss_mb)


@dataclass(frozen=True)
class ChildContext:
    """Everything a peer needs, rebuilt identically in each subprocess from the command line."""

    model_dir: Path
    selection: Flickr8kFiles
    cache_dir: Optional[Path]
    stream_pairs: int
    peer: str
    device: str
    precision: str
    scores_dir: Path
    """Where peers that score per item save their per-item scores (``<peer>.npy``), for the parent to compare."""


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _worker_cpu_seconds() -> float:
    """CPU seconds used so far by this process's living child processes (DataLoader workers)."""
    import psutil

    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


class TreeMemorySampler:
    """Peak, over samples taken every ``interval`` seconds on a thread, of the PSS summed over this process and its
    living descendants (DataLoader workers): the memory the run holds, pages shared after a fork counted once."""

    def __init__(self, interval: float = 0.5) -> None:
        import psutil

        self._process = psutil.Process()
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_until_stopped, daemon=True)
        self.peak_bytes = 0

    def _tree_pss(self) -> int:
        import psutil

        total = 0
        for process in [self._process, *self._process.children(recursive=True)]:
            try:
                total += process.memory_full_info().pss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return total

    def _sample_until_stopped(self) -> None:
        while True:
            self.peak_bytes = max(self.peak_bytes, self._tree_pss())
            if self._stop.wait(self._interval):
                return

    def __enter__(self) -> "TreeMemorySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


def _timed(run: Callable[[], float]) -> Tuple[float, float, float]:
    """(wall seconds, CPU seconds of this process over all its threads, value) of ``run()``; the device's queued work
    is waited for before the clock stops."""
    start, cpu_start = time.perf_counter(), _cpu_seconds()
    value = run()
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return time.perf_counter() - start, _cpu_seconds() - cpu_start, value


def _warm_capeval(context: ChildContext, with_references: bool = False,
                  cache_dir: Optional[Path] = None) -> Tuple[CLIPScore, float]:
    """A capeval scorer that has scored the warm-up pair, and the seconds that took with loading."""
    start = time.perf_counter()
    scorer = CLIPScore(model=context.model_dir, cache_dir=cache_dir, device=context.device,
                       precision=context.precision)
    scorer.score([warm_up_image()], [WARM_UP_CAPTION], [[WARM_UP_CAPTION]] if with_references else None)
    return scorer, time.perf_counter() - start


def run_capeval(context: ChildContext, workload: Workload, with_references: bool,
                cache_dir: Optional[Path] = None) -> Dict[str, Any]:
    """capeval's ``CLIPScore.score`` on the workload (CLIP-S only, or CLIP-S and RefCLIP-S)."""
    scorer, load_seconds = _warm_capeval(context, with_references, cache_dir)
    encoded_before = dict(scorer.engine.encoded)
    references = workload.references if with_references else None
    result: Dict[str, Any] = {}

    def score() -> float:
        result.update(scorer.score(workload.images, workload.candidates, references))
        return result["clip_score"]

    seconds, cpu_seconds, mean = _timed(score)
    np.save(context.scores_dir / f"{context.peer}.npy", np.asarray(result["clip_scores"]))
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "load_seconds": load_seconds, "mean_score": mean,
            "images_encoded": scorer.engine.encoded["image"] - encoded_before["image"],
            "texts_encoded": scorer.engine.encoded["text"] - encoded_before["text"]}


def run_capeval_stream(context: ChildContext) -> Dict[str, Any]:
    """capeval on ``stream_pairs`` generator-fed pairs (images cycling over the files, captions over all captions)."""
    scorer, load_seconds = _warm_capeval(context)
    files = [str(path) for _, path in context.selection.files]
    count = context.stream_pairs
    seconds, cpu_seconds, mean = _timed(
        lambda: scorer.score(cycled(files, count), cycled(context.selection.all_captions, count))["clip_score"])
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "load_seconds": load_seconds, "mean_score": mean,
            "pairs": count, "images_encoded": scorer.engine.encoded["image"] - 1,
            "texts_encoded": scorer.engine.encoded["text"] - 1}


def run_capeval_images(context: ChildContext, workload: Workload) -> Dict[str, Any]:
    """Image encoding alone: capeval's image path end to end (read, hash, decode, transform, encode) over the
    distinct files, then the model forward alone on a ready uint8 batch (best of 3)."""
    scorer, load_seconds = _warm_capeval(context)
    files = list(dict.fromkeys(workload.images))
    seconds, cpu_seconds, _ = _timed(lambda: float(scorer.engine.image_features(
        [validate_image(path, index) for index, path in enumerate(files)]).shape[0]))
    backbone = scorer.backbone
    batch = torch.stack([backbone.image_transform.to_uint8(Image.open(path)) for path in files[:64]])
    forward_seconds = min(_timed(lambda: float(backbone.encode_images(batch)[0, 0]))[0] for _ in range(3))
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "load_seconds": load_seconds,
            "mean_score": float("nan"), "pairs": len(files), "images_encoded": len(files),
            "extra": {"forward_images_per_second": len(batch) / forward_seconds,
                      "matmul_flops": matmul_flops_per_second(torch.get_num_threads())}}


class _TensorFeatures(torch.nn.Module):
    """Adapter for torchmetrics 1.9, which expects ``get_*_features`` to return tensors: transformers 5 returns a
    ``BaseModelOutputWithPooling`` whose ``pooler_output`` holds the projected features. Same computation."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model
        self.config = model.config

    def get_image_features(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.model.get_image_features(pixel_values=pixel_values).pooler_output

    def get_text_features(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model.get_text_features(input_ids=input_ids, attention_mask=attention_mask).pooler_output


def run_torchmetrics(context: ChildContext, workload: Workload, batch_size: int = 64) -> Dict[str, Any]:
    """torchmetrics' ``CLIPScore`` given the same model through its callable; images decoded to uint8 tensors and
    fed ``batch_size`` pairs per ``update`` with the prompted captions."""
    from torchmetrics.multimodal import CLIPScore as TorchmetricsCLIPScore
    from torchvision.transforms.functional import pil_to_tensor
    from transformers import CLIPModel, CLIPProcessor

    def model_and_processor() -> tuple:
        model = CLIPModel.from_pretrained(context.model_dir).eval()
        return _TensorFeatures(model), CLIPProcessor.from_pretrained(context.model_dir)

    def load(path: str) -> torch.Tensor:  # torchmetrics runs the model on the device of the images
        with Image.open(path) as image:
            return pil_to_tensor(image.convert("RGB")).to(context.device)

    start = time.perf_counter()
    metric = TorchmetricsCLIPScore(model_name_or_path=model_and_processor).to(context.device)
    metric.update([pil_to_tensor(warm_up_image()).to(context.device)], [CLIPScore.prompt + WARM_UP_CAPTION])
    metric.reset()
    load_seconds = time.perf_counter() - start

    def score() -> float:
        for first in range(0, len(workload), batch_size):
            images = [load(path) for path in workload.images[first:first + batch_size]]
            metric.update(images, [CLIPScore.prompt + text for text in workload.candidates[first:first + batch_size]])
        return float(metric.compute())

    seconds, cpu_seconds, mean = _timed(score)
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "load_seconds": load_seconds, "mean_score": mean}


def _reference_style_parts(model_dir: Path) -> tuple:
    """The HF model, the reference torchvision transform and OpenAI's ``clip.tokenize``, as the reference code has."""
    from torchvision import transforms
    from transformers import CLIPModel

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # clip-anytorch's pkg_resources deprecation notice
        import clip

    model = CLIPModel.from_pretrained(model_dir).eval()
    transform = transforms.Compose([
        transforms.Resize(224, interpolation=transforms.InterpolationMode.BICUBIC),
        transforms.CenterCrop(224),
        lambda image: image.convert("RGB"),
        transforms.ToTensor(),
        transforms.Normalize((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)),
    ])
    return model, transform, clip.tokenize


def _encode(model: torch.nn.Module, pixels: torch.Tensor, tokens: torch.Tensor) -> Tuple[np.ndarray, np.ndarray]:
    with torch.inference_mode():
        images = model.get_image_features(pixel_values=pixels).pooler_output
        texts = model.get_text_features(input_ids=tokens).pooler_output
    return images.double().numpy(), texts.double().numpy()


def run_per_pair(context: ChildContext, workload: Workload) -> Dict[str, Any]:
    """The reference cost per pair: open, transform and encode the pair's image, tokenise (77 tokens) and encode its
    caption, batch size 1."""
    start = time.perf_counter()
    model, transform, tokenize = _reference_style_parts(context.model_dir)

    def pair_score(image: Image.Image, caption: str) -> float:
        images, texts = _encode(model, transform(image).unsqueeze(0), tokenize([CLIPScore.prompt + caption],
                                                                                 truncate=True))
        return float(clip_s(images, texts, CLIPScore.weight)[0])

    pair_score(warm_up_image(), WARM_UP_CAPTION)
    load_seconds = time.perf_counter() - start

    def score() -> float:
        total = 0.0
        for path, caption in zip(workload.images, workload.candidates):
            with Image.open(path) as image:
                total += pair_score(image, caption)
        return total / len(workload)

    seconds, cpu_seconds, mean = _timed(score)
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "load_seconds": load_seconds, "mean_score": mean}


class _PathDataset(torch.utils.data.Dataset):
    """One transformed image per pair (no de-duplication), as the reference code's image dataset."""

    def __init__(self, paths: Sequence[str], transform: Callable[[Image.Image], torch.Tensor]) -> None:
        self.paths = paths
        self.transform = transform

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> torch.Tensor:
        with Image.open(self.paths[index]) as image:
            return self.transform(image)


def _reference_clip_s(images: np.ndarray, candidates: np.ndarray, weight: float = CLIPScore.weight) -> np.ndarray:
    """``clipscore.py``'s ``get_clip_score`` arithmetic (NumPy >= 1.21 branch), in the features' own dtype."""
    images = images / np.sqrt(np.sum(images ** 2, axis=1, keepdims=True))
    candidates = candidates / np.sqrt(np.sum(candidates ** 2, axis=1, keepdims=True))
    return weight * np.clip(np.sum(images * candidates, axis=1), 0, None)


class _TokenisedCaptions(torch.utils.data.Dataset):
    """``clipscore.py``'s caption dataset: prompt, then ``clip.tokenize`` to 77 tokens (truncating)."""

    def __init__(self, captions: Sequence[str], tokenize: Callable[..., torch.Tensor]) -> None:
        self.captions, self.tokenize = captions, tokenize

    def __len__(self) -> int:
        return len(self.captions)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.tokenize(CLIPScore.prompt + self.captions[index], truncate=True).squeeze()


def run_reference_batched(context: ChildContext, workload: Workload) -> Dict[str, Any]:
    """``clipscore.py``'s loop without de-duplication: every pair's image through a DataLoader (8 workers, 64 per
    batch, its torchvision transform) into ``clip``'s model (fp16 weights on CUDA, as ``clip.load`` builds it; fp32
    on the CPU), captions through a DataLoader (8 workers, 256 per batch, ``clip.tokenize`` to 77 tokens), then its
    NumPy arithmetic in the features' dtype."""
    from clip.model import convert_weights

    start = time.perf_counter()
    _, transform, tokenize = _reference_style_parts(context.model_dir)
    device = torch.device(context.device)
    model = random_vit_b32_openai()
    if device.type == "cuda":
        convert_weights(model)  # what clip.load does on CUDA (and model.float() on the CPU)
    model = model.to(device)
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    with torch.no_grad():
        model.encode_image(transform(warm_up_image()).unsqueeze(0).to(device).to(dtype))
        model.encode_text(tokenize([CLIPScore.prompt + WARM_UP_CAPTION]).to(device))
    load_seconds = time.perf_counter() - start

    def score() -> float:
        images = torch.utils.data.DataLoader(_PathDataset(workload.images, transform), batch_size=64, num_workers=8,
                                             shuffle=False)
        captions = torch.utils.data.DataLoader(_TokenisedCaptions(workload.candidates, tokenize), batch_size=256,
                                               num_workers=8, shuffle=False)
        image_rows, text_rows = [], []
        with torch.no_grad():
            for pixels in images:
                image_rows.append(model.encode_image(pixels.to(device).to(dtype)).cpu().numpy())
            for tokens in captions:
                text_rows.append(model.encode_text(tokens.to(device)).cpu().numpy())
        per = _reference_clip_s(np.concatenate(image_rows), np.concatenate(text_rows))
        np.save(context.scores_dir / f"{context.peer}.npy", per.astype(np.float64))
        return float(np.mean(per))

    seconds, cpu_seconds, mean = _timed(score)
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "load_seconds": load_seconds, "mean_score": mean}


def _stub_forwards() -> None:
    """Replace both towers' forwards by zero-cost stubs returning constant features of the right shape and device."""
    def ones(self: Backbone, batch: torch.Tensor) -> torch.Tensor:
        return torch.ones(len(batch), self.model.config.projection_dim, dtype=self.dtype, device=self.device)

    Backbone.encode_images = ones  # type: ignore[method-assign]
    Backbone.encode_texts = ones  # type: ignore[method-assign]


def run_capeval_host(context: ChildContext, workload: Workload) -> Dict[str, Any]:
    """capeval end to end with the model forward stubbed out: validation, hashing, decoding, transfers, texts."""
    _stub_forwards()
    scorer, load_seconds = _warm_capeval(context)
    workers_before = _worker_cpu_seconds()
    seconds, cpu_seconds, _ = _timed(lambda: scorer.score(workload.images, workload.candidates)["clip_score"])
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "load_seconds": load_seconds, "mean_score": float("nan"),
            "pairs": len(workload), "images_encoded": scorer.engine.encoded["image"] - 1,
            "extra": {"worker_cpu_seconds": _worker_cpu_seconds() - workers_before}}


class _DecodedFiles(torch.utils.data.Dataset):
    """Read and decode a file, then capeval's exact resize, crop and conversion to uint8 (nothing else)."""

    def __init__(self, transform: ImageTransform) -> None:
        self.transform = transform

    def __getitem__(self, path: str) -> torch.Tensor:
        with Image.open(path) as image:
            return self.transform.to_uint8(image)


class _Files(torch.utils.data.Sampler):
    def __init__(self, groups: List[List[str]]) -> None:
        self.groups = groups

    def __iter__(self) -> Iterator[List[str]]:
        return iter(self.groups)

    def __len__(self) -> int:
        return len(self.groups)


def run_decode_limit(context: ChildContext, workload: Workload) -> Dict[str, Any]:
    """The decode limit: the workload's distinct files decoded and transformed by ``cpu_count`` persistent
    DataLoader worker processes, in capeval's groups, nothing else (workers started and warmed up untimed)."""
    files = list(dict.fromkeys(workload.images))
    sampler = _Files([files[:DECODE_GROUP]])
    start = time.perf_counter()
    loader = torch.utils.data.DataLoader(_DecodedFiles(ImageTransform()), batch_sampler=sampler,
                                         num_workers=os.cpu_count() or 1, persistent_workers=True,
                                         prefetch_factor=PREFETCH_GROUPS)
    for _ in loader:  # start the workers
        pass
    load_seconds = time.perf_counter() - start
    sampler.groups = [files[first:first + DECODE_GROUP] for first in range(0, len(files), DECODE_GROUP)]
    workers_before = _worker_cpu_seconds()
    seconds, cpu_seconds, count = _timed(lambda: float(sum(len(group) for group in loader)))
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "load_seconds": load_seconds, "mean_score": float("nan"),
            "pairs": int(count), "images_encoded": int(count),
            "extra": {"worker_cpu_seconds": _worker_cpu_seconds() - workers_before}}


PEERS: Dict[str, Tuple[str, Callable[[ChildContext], Dict[str, Any]]]] = {
    "capeval": ("expert", lambda c: run_capeval(c, expert_workload(c.selection), with_references=False)),
    "torchmetrics": ("expert", lambda c: run_torchmetrics(c, expert_workload(c.selection))),
    "capeval-1cap": ("one-caption", lambda c: run_capeval(c, one_caption_workload(c.selection), False)),
    "torchmetrics-1cap": ("one-caption", lambda c: run_torchmetrics(c, one_caption_workload(c.selection))),
    "capeval-ref-cold": ("expert", lambda c: run_capeval(c, expert_workload(c.selection), True, c.cache_dir)),
    "capeval-ref-warm": ("expert", lambda c: run_capeval(c, expert_workload(c.selection), True, c.cache_dir)),
    "capeval-images": ("expert", lambda c: run_capeval_images(c, expert_workload(c.selection))),
    "capeval-stream": ("stream", run_capeval_stream),
    "reference-batched": ("expert", lambda c: run_reference_batched(c, expert_workload(c.selection))),
    "reference-batched-1cap": ("one-caption", lambda c: run_reference_batched(c, one_caption_workload(c.selection))),
    "decode-limit": ("one-caption", lambda c: run_decode_limit(c, one_caption_workload(c.selection))),
    "capeval-host": ("one-caption", lambda c: run_capeval_host(c, one_caption_workload(c.selection))),
    "per-pair": ("expert", lambda c: run_per_pair(c, expert_workload(c.selection))),
}
HOST_ONLY_PEERS = ["decode-limit", "capeval-host"]
"""Peer name -> (workload, run), in run order (acceptance peers first, slow reference-style peers last). The
``-cold``/``-warm`` pair shares one on-disk cache folder, emptied before each cold run."""

DESCRIPTIONS = {
    "capeval-images": "capeval image path only (distinct files)",
    "capeval": "capeval CLIP-S",
    "torchmetrics": "torchmetrics CLIPScore",
    "capeval-ref-cold": "capeval CLIP-S+RefCLIP-S, cold disk cache",
    "capeval-ref-warm": "capeval CLIP-S+RefCLIP-S, warm disk cache",
    "reference-batched": "clipscore.py loop (8 workers, no dedup)",
    "reference-batched-1cap": "clipscore.py loop (8 workers, no dedup)",
    "decode-limit": "decode limit (cpu_count worker processes)",
    "capeval-host": "capeval, model forward stubbed (host only)",
    "per-pair": "reference style, per pair (batch 1)",
    "capeval-1cap": "capeval CLIP-S",
    "torchmetrics-1cap": "torchmetrics CLIPScore",
    "capeval-stream": "capeval CLIP-S, generator inputs",
}


def child_main(peer: str, arguments: argparse.Namespace) -> None:
    """Run one peer in this (fresh) process and print its result as one JSON line."""
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
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB
    result = PeerResult(peer=peer, workload=workload_name, pairs=pairs, peak_rss_mb=peak_rss_mb,
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


def matmul_flops_per_second(threads: int, size: int = 2048, repeats: int = 10) -> float:
    """Best measured fp32 ``torch.matmul`` rate of two ``size`` x ``size`` matrices (2 n^3 FLOPs each)."""
    torch.set_num_threads(threads)
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=generator)
    b = torch.randn(size, size, generator=generator)
    torch.matmul(a, b)
    best = min(_timed(lambda: float(torch.matmul(a, b)[0, 0]))[0] for _ in range(repeats))
    return 2 * size ** 3 / best


def vit_image_macs(model_dir: Path, pooled_last_layer: bool = False) -> int:
    """Multiply-accumulates of one image through the vision tower and projection, from the model's config: patch
    embedding, per layer QKV, attention scores and weighted sum, output projection and MLP, then the projection.
    ``pooled_last_layer``: what capeval executes, the last layer computing keys and values for every token but the
    rest for the class token only (capeval/models/clip/modeling.py)."""
    config = json.loads((model_dir / "config.json").read_text())
    vision, projection_dim = config["vision_config"], config["projection_dim"]
    patches = (vision["image_size"] // vision["patch_size"]) ** 2
    tokens, width, hidden = patches + 1, vision["hidden_size"], vision["intermediate_size"]
    patch_embedding = patches * vision.get("num_channels", 3) * vision["patch_size"] ** 2 * width

    def layer(queries: int) -> int:
        keys_and_values = 2 * tokens * width * width
        query_and_output_projections = 2 * queries * width * width
        scores_and_weighted_sum = 2 * queries * tokens * width
        mlp = 2 * queries * width * hidden
        return keys_and_values + query_and_output_projections + scores_and_weighted_sum + mlp

    layers = vision["num_hidden_layers"]
    encoder = (layers - 1) * layer(tokens) + layer(1 if pooled_last_layer else tokens)
    return patch_embedding + encoder + width * projection_dim


def _ratio(results: Dict[str, PeerResult], fast: str, slow: str, cpu: bool = False) -> Optional[float]:
    """How many times ``fast`` outpaces ``slow`` in pairs per wall-clock (or CPU) second; None if either is missing."""
    if fast not in results or slow not in results:
        return None
    fast_result, slow_result = results[fast], results[slow]
    if cpu:
        return (fast_result.pairs / fast_result.cpu_seconds) / (slow_result.pairs / slow_result.cpu_seconds)
    return fast_result.pairs_per_second / slow_result.pairs_per_second


def _times(value: Optional[float]) -> str:
    return "" if value is None else f"{value:.2f}"


def _verdict(target: str, measured: Optional[str], passed: bool) -> str:
    """One acceptance line: SKIP when not measured (``measured`` is None), else PASS or FAIL with the measurement."""
    if measured is None:
        return f"SKIP  {target}: not measured in this run"
    return f"{'PASS' if passed else 'FAIL'}  {target}: {measured}"


def _speed_up(wall: Optional[float], cpu: Optional[float]) -> Optional[str]:
    return None if wall is None or cpu is None else f"{wall:.2f}x (per CPU second {cpu:.2f}x)"


def report(results: Dict[str, PeerResult], arguments: argparse.Namespace, matmul: float, model_dir: Path) -> None:
    """Print the table, the physical-limit fractions and one PASS/FAIL line per acceptance target."""
    baseline = {"expert": "capeval", "one-caption": "capeval-1cap"}
    repeats = f"best wall time of {arguments.repeats} runs per peer; " if arguments.repeats > 1 else ""
    print(f"\n{arguments.images} image files, {arguments.threads} torch thread(s), {os.cpu_count()} CPU(s); {repeats}"
          "model loading and one warm-up pair excluded from every timing; each peer in a fresh process\n")
    header = (f"{'workload':11s} {'peer':42s} {'pairs':>6s} {'wall s':>7s} {'CPU s':>7s} {'pairs/s':>8s} "
              f"{'peak mem MB':>11s} {'capeval x':>9s} {'x (CPU)':>7s} {'img enc':>7s} {'txt enc':>7s} "
              f"{'mean score':>10s}")
    print(header)
    print("-" * len(header))
    for peer, result in results.items():
        reference = baseline.get(result.workload)
        compared = reference is not None and not peer.startswith(("capeval", "decode"))  # peers, not capeval's variants
        ratio = _ratio(results, reference, peer) if compared else None
        cpu_ratio = _ratio(results, reference, peer, cpu=True) if compared else None
        print(f"{result.workload:11s} {DESCRIPTIONS[peer]:42s} {result.pairs:6d} {result.seconds:7.1f} "
              f"{result.cpu_seconds:7.1f} {result.pairs_per_second:8.2f} {result.peak_memory_mb:11.0f} "
              f"{_times(ratio):>9s} {_times(cpu_ratio):>7s} "
              f"{'' if result.images_encoded is None else result.images_encoded:>7} "
              f"{'' if result.texts_encoded is None else result.texts_encoded:>7} {result.mean_score:10.4f}")
    print("capeval x: capeval CLIP-S pairs/s on the same workload / this peer's pairs/s (x (CPU): the same per CPU "
          "second of the peer's process;\nDataLoader workers of the reference-batched peer not counted). mean score: "
          "CLIP-S for capeval and the reference-style peers, 100 * cosine (floored at 0) for torchmetrics.")

    macs, executed_macs = vit_image_macs(model_dir), vit_image_macs(model_dir, pooled_last_layer=True)
    if "capeval-images" in results:  # the machine is shared: keep the best of the two matmul measurements
        matmul = max(matmul, (results["capeval-images"].extra or {})["matmul_flops"])
    print(f"\nViT-B/32 image encoding: {macs / 1e9:.2f} GMACs = {2 * macs / 1e9:.2f} GFLOPs per image (full forward; "
          f"capeval executes {2 * executed_macs / 1e9:.2f}: last layer for the class token only); fp32 matmul "
          f"(2048^3, best of 10, in the parent and in the image peer): {matmul / 1e9:.1f} GFLOP/s with "
          f"{arguments.threads} thread(s)")
    if "capeval-images" in results:
        images = results["capeval-images"]
        rates = {"model forward only (one batch <= 64)": (images.extra or {})["forward_images_per_second"],
                 "capeval image path end to end": images.pairs_per_second}
        for what, rate in rates.items():
            print(f"  {what:38s} {rate:7.2f} images/s = {rate * 2 * macs / 1e9:6.1f} model GFLOP/s = "
                  f"{100 * rate * 2 * macs / matmul:5.1f}% of the matmul rate (executed: "
                  f"{100 * rate * 2 * executed_macs / matmul:5.1f}%)")

    limit = results.get("decode-limit")
    host_fraction = one_caption_fraction = None
    if limit is not None:
        print(f"\nDecode limit: {limit.pairs_per_second:.1f} images/s ({os.cpu_count()} worker processes decoding and "
              f"transforming the {limit.pairs} files, nothing else)")
        for peer in ("capeval-host", "capeval-1cap"):
            if peer in results:
                fraction = results[peer].pairs_per_second / limit.pairs_per_second
                print(f"  {DESCRIPTIONS[peer]:44s} {results[peer].pairs_per_second:8.1f} images/s = "
                      f"{fraction:.3f} of the decode limit")
                host_fraction = fraction if peer == "capeval-host" else host_fraction
                if peer == "capeval-host" and limit.extra and results[peer].extra:
                    def per_cpu(result: PeerResult) -> float:
                        return result.pairs / (result.cpu_seconds + (result.extra or {})["worker_cpu_seconds"])

                    print(f"  {'':44s} per CPU second (process and workers): {per_cpu(results[peer]):.1f} against "
                          f"{per_cpu(limit):.1f} images = {per_cpu(results[peer]) / per_cpu(limit):.3f}")
                one_caption_fraction = fraction if peer == "capeval-1cap" else one_caption_fraction
    for mine, reference in (("capeval", "reference-batched"), ("capeval-1cap", "reference-batched-1cap")):
        paths = [arguments.work_dir / "scores" / f"{name}.npy" for name in (mine, reference)]
        if all(path.is_file() for path in paths):
            ours, theirs = (np.load(path) for path in paths)
            print(f"Per-item CLIP-S, {mine} vs {reference} ({arguments.device}): {int(np.sum(ours == theirs))} of "
                  f"{len(ours)} equal, max |difference| {np.max(np.abs(ours - theirs)):.3g}")

    print("\nAcceptance:")
    print(_verdict(f"host pipeline (model forward stubbed) >= {TARGET_HOST_ONLY_FRACTION} of the decode limit",
                   None if host_fraction is None else f"{host_fraction:.3f}",
                   host_fraction is not None and host_fraction >= TARGET_HOST_ONLY_FRACTION))
    if arguments.device != "cpu":
        versus_one = _ratio(results, "capeval-1cap", "reference-batched-1cap")
        print(_verdict(f"on {arguments.device}: capeval >= {TARGET_GPU_ONE_CAPTION_VS_REFERENCE}x the clipscore.py loop, "
                       "one caption per image", None if versus_one is None else f"{versus_one:.2f}x",
                       versus_one is not None and versus_one >= TARGET_GPU_ONE_CAPTION_VS_REFERENCE))
        print(_verdict(f"on {arguments.device}: capeval >= {TARGET_GPU_DECODE_FRACTION} of the decode limit, one "
                       "caption per image", None if one_caption_fraction is None else f"{one_caption_fraction:.3f}",
                       one_caption_fraction is not None and one_caption_fraction >= TARGET_GPU_DECODE_FRACTION))
        versus_expert = _ratio(results, "capeval", "reference-batched")
        print(_verdict(f"on {arguments.device}: capeval >= {TARGET_GPU_EXPERT_VS_REFERENCE}x the clipscore.py loop, "
                       "Expert shape", None if versus_expert is None else f"{versus_expert:.2f}x",
                       versus_expert is not None and versus_expert >= TARGET_GPU_EXPERT_VS_REFERENCE))
    expert, expert_cpu = _ratio(results, "capeval", "torchmetrics"), _ratio(results, "capeval", "torchmetrics", True)
    print(_verdict(f"capeval CLIP-S >= {TARGET_EXPERT_RATIO}x torchmetrics CLIPScore on the Expert shape",
                   _speed_up(expert, expert_cpu), expert is not None and expert >= TARGET_EXPERT_RATIO))
    one = _ratio(results, "capeval-1cap", "torchmetrics-1cap")
    one_cpu = _ratio(results, "capeval-1cap", "torchmetrics-1cap", True)
    print(_verdict(f"capeval CLIP-S >= {TARGET_ONE_CAPTION_RATIO}x torchmetrics CLIPScore, one caption per image",
                   _speed_up(one, one_cpu), one is not None and one >= TARGET_ONE_CAPTION_RATIO))
    warm = _ratio(results, "capeval-ref-warm", "capeval-ref-cold")
    print(_verdict(f"warm on-disk cache re-scores the Expert workload (CLIP-S + RefCLIP-S) >= "
                   f"{TARGET_WARM_CACHE_SPEEDUP:.0f}x faster than cold",
                   None if warm is None else f"{warm:.1f}x", warm is not None and warm >= TARGET_WARM_CACHE_SPEEDUP))
    stream = results.get("capeval-stream")
    measured = None
    if stream is not None:
        measured = (f"{stream.pairs:,} pairs, peak memory {stream.peak_memory_mb:.0f} MB (process RSS "
                    f"{stream.peak_rss_mb:.0f} MB, process tree PSS {stream.peak_tree_pss_mb:.0f} MB)")
        if stream.pairs < TARGET_STREAM_PAIRS:
            measured += " (too few pairs for the target: run without --quick)"
    print(_verdict(f"{TARGET_STREAM_PAIRS:,} streamed pairs with peak memory < {TARGET_STREAM_RSS_MB:.0f} MB",
                   measured, stream is not None and stream.pairs >= TARGET_STREAM_PAIRS
                   and stream.peak_memory_mb < TARGET_STREAM_RSS_MB))


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
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get(
        "CAPEVAL_FLICKR8K_DIR", REPO_ROOT.parent / "shared" / "data" / "flickr8k")),
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
                             "decode-limit,capeval-host), for the host pipeline's fraction of the limit")
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


def _write_json(path: Path, arguments: argparse.Namespace, matmul: float, model_dir: Path,
                results: Dict[str, PeerResult]) -> None:
    path.write_text(json.dumps(
        {"arguments": {key: str(value) for key, value in vars(arguments).items()}, "matmul_flops": matmul,
         "image_macs": vit_image_macs(model_dir), "results": [asdict(result) for result in results.values()]},
        indent=2))


def main(argv: Optional[Sequence[str]] = None) -> None:
    arguments = parse_arguments(argv)
    if arguments.child is not None:
        child_main(arguments.child, arguments)
        return
    if arguments.peers is not None:
        peers = [name.strip() for name in arguments.peers.split(",")]
    else:
        peers = HOST_ONLY_PEERS if arguments.host_only else list(PEERS)
    unknown = [name for name in peers if name not in PEERS]
    if unknown:
        raise SystemExit(f"unknown peers {unknown}; choose from {list(PEERS)}")
    if "capeval-ref-warm" in peers and peers.index("capeval-ref-warm") != peers.index("capeval-ref-cold") + 1:
        raise SystemExit("capeval-ref-warm must come right after capeval-ref-cold (which fills the cache)")
    model_dir = random_vit_b32_folder(arguments.work_dir)
    scores_dir = arguments.work_dir / "scores"
    shutil.rmtree(scores_dir, ignore_errors=True)
    scores_dir.mkdir(parents=True)
    matmul = matmul_flops_per_second(arguments.threads)
    print(f"fp32 matmul: {matmul / 1e9:.1f} GFLOP/s", flush=True)
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
                      f"{result.pairs_per_second:.2f} pairs/s, CPU {result.cpu_seconds:.1f} s, peak memory "
                      f"{result.peak_memory_mb:.0f} MB ({time.perf_counter() - started:.0f} s with start-up)", flush=True)
                if peer not in results or result.seconds < results[peer].seconds:
                    results[peer] = result
                if arguments.json_out is not None:
                    _write_json(arguments.json_out, arguments, matmul, model_dir, results)
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    report(results, arguments, matmul, model_dir)


if __name__ == "__main__":
    main()

"""The host pipeline against its limit: capeval end to end with the model forward stubbed out, and the decode limit
(the same files decoded and transformed by worker processes, nothing else)."""
from __future__ import annotations

import os
import time
from typing import Any, Dict, Iterator, List

import torch
from PIL import Image

from _measurement import timed, worker_cpu_seconds
from _throughput.capeval_peers import warm_capeval
from _throughput.context import ChildContext, measured
from _throughput.workloads import Workload
from capeval.models.clip.encoders import DECODE_GROUP, PREFETCH_GROUPS
from capeval.models.clip.loading import Backbone
from capeval.models.clip.preprocessing import ImageTransform


def _stub_forwards() -> None:
    """Replace both towers' forwards by zero-cost stubs returning constant features of the right shape and device."""
    def ones(self: Backbone, batch: torch.Tensor) -> torch.Tensor:
        return torch.ones(len(batch), self.model.config.projection_dim, dtype=self.dtype, device=self.device)

    Backbone.encode_images = ones  # type: ignore[method-assign]
    Backbone.encode_texts = ones  # type: ignore[method-assign]


def run_capeval_host(context: ChildContext, workload: Workload) -> Dict[str, Any]:
    """capeval end to end with the model forward stubbed out: validation, hashing, decoding, transfers, texts."""
    _stub_forwards()
    scorer, load_seconds = warm_capeval(context)
    workers_before = worker_cpu_seconds()
    timing = timed(lambda: scorer.score(workload.images, workload.candidates)["clip_score"])
    return measured(timing, load_seconds, mean_score=float("nan"), pairs=len(workload),
                    images_encoded=scorer.engine.encoded["image"] - 1,
                    extra={"worker_cpu_seconds": worker_cpu_seconds() - workers_before})


class _DecodedFiles(torch.utils.data.Dataset):
    """Read and decode a file, then capeval's exact resize, crop and conversion to uint8 (nothing else)."""

    def __init__(self, transform: ImageTransform) -> None:
        self.transform = transform

    def __getitem__(self, path: str) -> torch.Tensor:
        with Image.open(path) as image:
            return self.transform.to_uint8(image, "image")


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
    workers_before = worker_cpu_seconds()
    timing = timed(lambda: float(sum(len(group) for group in loader)))
    count = int(timing[2])
    return measured(timing, load_seconds, mean_score=float("nan"), pairs=count, images_encoded=count,
                    extra={"worker_cpu_seconds": worker_cpu_seconds() - workers_before})

"""capeval's peers: ``CLIPScore.score`` on a workload (CLIP-S alone, or with RefCLIP-S on an on-disk cache), on
streamed generator inputs, and its image path alone against the model forward alone."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import numpy as np
import torch
from PIL import Image

from _measurement import matmul_flops_per_second, timed
from _throughput.context import ChildContext, measured
from _throughput.workloads import WARM_UP_CAPTION, Workload, cycled, warm_up_image
from capeval import CLIPScore
from capeval.inputs import validate_image


def warm_capeval(context: ChildContext, with_references: bool = False,
                 cache_dir: Optional[Path] = None) -> Tuple[CLIPScore, float]:
    """A capeval scorer that has scored the warm-up pair, and the seconds that took with loading."""
    start = time.perf_counter()
    scorer = CLIPScore(model=context.model_dir, cache_dir=cache_dir, device=context.device,
                       precision=context.precision)
    scorer.score([warm_up_image()], [WARM_UP_CAPTION], [[WARM_UP_CAPTION]] if with_references else None)
    return scorer, time.perf_counter() - start


def run_capeval(context: ChildContext, workload: Workload, with_references: bool) -> Dict[str, Any]:
    """capeval's ``CLIPScore.score`` on the workload (CLIP-S only, or CLIP-S and RefCLIP-S), with the context's
    on-disk cache folder if it has one."""
    scorer, load_seconds = warm_capeval(context, with_references, context.cache_dir)
    encoded_before = dict(scorer.engine.encoded)
    references = workload.references if with_references else None
    result: Dict[str, Any] = {}

    def score() -> float:
        result.update(scorer.score(workload.images, workload.candidates, references))
        return result["clip_score"]

    timing = timed(score)
    np.save(context.scores_dir / f"{context.peer}.npy", np.asarray(result["clip_scores"]))
    return measured(timing, load_seconds, images_encoded=scorer.engine.encoded["image"] - encoded_before["image"],
                    texts_encoded=scorer.engine.encoded["text"] - encoded_before["text"])


def run_capeval_stream(context: ChildContext) -> Dict[str, Any]:
    """capeval on ``stream_pairs`` generator-fed pairs (images cycling over the files, captions over all captions)."""
    scorer, load_seconds = warm_capeval(context)
    files = [str(path) for _, path in context.selection.files]
    count = context.stream_pairs
    timing = timed(
        lambda: scorer.score(cycled(files, count), cycled(context.selection.all_captions, count))["clip_score"])
    return measured(timing, load_seconds, pairs=count, images_encoded=scorer.engine.encoded["image"] - 1,
                    texts_encoded=scorer.engine.encoded["text"] - 1)


def run_capeval_images(context: ChildContext, workload: Workload) -> Dict[str, Any]:
    """Image encoding alone: capeval's image path end to end (read, hash, decode, transform, encode) over the
    distinct files, then the model forward alone on a ready uint8 batch (best of 3)."""
    scorer, load_seconds = warm_capeval(context)
    files = list(dict.fromkeys(workload.images))
    timing = timed(lambda: float(scorer.engine.image_features(
        [validate_image(path, index) for index, path in enumerate(files)]).shape[0]))
    backbone = scorer.backbone
    batch = torch.stack([backbone.image_transform.to_uint8(Image.open(path), str(path)) for path in files[:64]])
    forward_seconds = min(timed(lambda: float(backbone.encode_images(batch)[0, 0]))[0] for _ in range(3))
    return measured(timing, load_seconds, mean_score=float("nan"), pairs=len(files), images_encoded=len(files),
                    extra={"forward_images_per_second": len(batch) / forward_seconds,
                           "matmul_flops": matmul_flops_per_second(torch.get_num_threads())})

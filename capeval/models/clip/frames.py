"""CLIP's image tower over the frames of videos, as a row producer of the embedding engine.

One row per video: its frame features ``(T, dim)``, each projected and L2-normalised in float32 as EMScore's
``encode_video`` does (``encode_image(...).float()``, then divided by its norm), flattened to ``(T * dim,)`` (read
with :meth:`~capeval.engine.EmbeddingEngine.row_list`). Videos are decoded and their frames transformed to uint8 in
worker processes (each video by one worker, its frames streamed in groups of ``batch_size``), so that the frames
held at once are a few groups per worker whatever the length of the videos; the model runs here on each group as it
arrives, and a video's row is complete when its last group is encoded. A frame that ``num_frames`` samples several
times is decoded, transformed and encoded once, and its features repeated in the row; so the work is bounded by the
distinct frames (the row's length by :data:`~capeval.frame_sampling.MAX_NUM_FRAMES`). Rows are given in planned order,
although the workers finish their videos in any order. With ``progress``, a bar counts the frames encoded (as
sampled, repeats included) beside the engine's bar of videos.

Warnings a worker's decoder gives (:class:`~capeval.video.VideoDecodeWarning`) are raised again here, in the caller's
process; an :class:`~capeval.inputs.InputError` of a video (undecodable file) reaches the caller as it is.
"""
from __future__ import annotations

import warnings
from typing import Dict, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from tqdm.auto import tqdm

from capeval.caller import user_stacklevel
from capeval.engine import Batch, RowProducer
from capeval.inputs import InputError
from capeval.models.clip.decoding import as_is, started_workers
from capeval.models.clip.encoders import backbone_cache_key, default_num_workers
from capeval.models.clip.loading import Backbone
from capeval.models.clip.preprocessing import ImageTransform
from capeval.processes import worker_context
from capeval.runtime import process_state
from capeval.frame_sampling import check_num_frames
from capeval.video import VideoItem, decoder_version

PREFETCH_GROUPS = 2
"""Frame groups each worker decodes ahead of the model."""


class FrameGroup(NamedTuple):
    """What a worker sends for one video: ``pixels`` (n, 3, size, size) uint8 of its next distinct frames (``None``
    when a video's frames ended exactly at the previous group) and the times each is sampled (``repeats``, n), whether
    this is its ``last`` group, the decoder's warnings (category, message) collected up to the last group, or the
    video's :class:`InputError` as ``pixels``."""

    position: int
    pixels: Union[np.ndarray, InputError, None]
    last: bool
    warnings: Tuple[Tuple[type, str], ...] = ()
    repeats: Optional[np.ndarray] = None


class DecodedFrames(torch.utils.data.IterableDataset):
    """The loader's dataset for one request: worker ``w`` of ``W`` decodes videos ``w, w + W, ...`` in turn."""

    def __init__(self, videos: Sequence[VideoItem], transform: ImageTransform, num_frames: Optional[int],
                 group_size: int, threads: int) -> None:
        self.videos = list(videos)
        self.transform = transform
        self.num_frames = num_frames
        self.group_size = group_size
        self.threads = threads

    def __iter__(self) -> Iterator[FrameGroup]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        for position in range(worker, len(self.videos), workers):
            yield from self._groups(position)

    def _groups(self, position: int) -> Iterator[FrameGroup]:
        group: List[np.ndarray] = []
        repeats: List[int] = []
        notes: List[Tuple[type, str]] = []
        video = self.videos[position]
        frames = video.distinct_frames(self.num_frames, threads=self.threads)
        try:
            while True:
                with warnings.catch_warnings(record=True) as caught:  # only around the decoder: never across a yield
                    warnings.simplefilter("always")
                    frame = next(frames, None)
                notes.extend((w.category, str(w.message)) for w in caught)
                if frame is None:
                    break
                name = f"a frame of videos[{video.index}] ({video.label})"
                group.append(self.transform.to_uint8(frame[0], name).numpy())
                repeats.append(frame[1])
                if len(group) == self.group_size:
                    yield FrameGroup(position, np.stack(group), False, repeats=np.array(repeats))
                    group, repeats = [], []
        except InputError as error:
            yield FrameGroup(position, error, True)
            return
        yield FrameGroup(position, np.stack(group) if group else None, True, tuple(notes), np.array(repeats))


class VideoFrameRows(RowProducer[VideoItem]):
    """Normalised frame features of validated video entries that hold frames (files or frames in memory), keyed by
    the video's content; ``num_frames`` frames sampled as :func:`capeval.frame_sampling.sample_indices` samples them (all when
    ``None``). ``num_workers`` decoding processes (:func:`~capeval.models.clip.encoders.default_num_workers` when
    ``None``; 0 decodes in this process, with FFmpeg's threads); they live for one request. ``progress`` shows a bar
    of the frames encoded."""

    kind = "video_frames"

    def __init__(self, backbone: Backbone, batch_size: int, num_frames: Optional[int],
                 num_workers: Optional[int] = None, *, progress: bool = False) -> None:
        if batch_size < 1:
            raise ValueError("batch sizes must be positive")
        check_num_frames(num_frames)
        self.backbone = backbone
        self.batch_size = batch_size
        self.num_frames = num_frames
        self.num_workers = num_workers if num_workers is not None else default_num_workers()
        self.progress = progress
        self._loader_iterator: Optional[Iterator[FrameGroup]] = None

    def key(self, item: VideoItem) -> str:
        return item.key

    def cache_key(self) -> str:
        frames = "all" if self.num_frames is None else str(self.num_frames)
        transform = self.backbone.image_transform.cache_settings()
        return backbone_cache_key(self.backbone, f"{transform}|frames={frames}|normalised|"
                                                 f"{decoder_version()}")

    def plan(self, items: Mapping[str, VideoItem]) -> List[Batch]:
        """One video per batch (its frames are batched for the model as they are decoded)."""
        return [[(key, item)] for key, item in items.items()]

    def encode(self, batches: List[List[VideoItem]]) -> Iterator[List[np.ndarray]]:
        """Starts decoding now; the returned iterator runs the model and gives each video's row in order."""
        videos = [batch[0] for batch in batches]
        workers = min(self.num_workers, len(videos))
        dataset = DecodedFrames(videos, self.backbone.image_transform, self.num_frames, self.batch_size,
                                threads=1 if workers > 0 else 0)
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=None, num_workers=workers, collate_fn=as_is,
            prefetch_factor=PREFETCH_GROUPS if workers > 0 else None,
            multiprocessing_context=worker_context() if workers > 0 else None)
        self._loader_iterator = started_workers(loader)
        return self._encoded(self._loader_iterator, len(videos))

    def abandon(self) -> None:
        """Shut the decoding workers down (deleting the loader's iterator joins them)."""
        self._loader_iterator = None

    @torch.inference_mode()
    def _normalised_features(self, pixels: np.ndarray) -> torch.Tensor:
        features = self.backbone.encode_images(torch.from_numpy(pixels)).float()
        return features / features.norm(dim=-1, keepdim=True)

    def _encoded(self, groups: Iterator[FrameGroup], count: int) -> Iterator[List[np.ndarray]]:
        parts: Dict[int, List[torch.Tensor]] = {}
        finished: Dict[int, np.ndarray] = {}
        next_position = 0
        bar = tqdm(total=None if self.num_frames is None else self.num_frames * count, desc="encoding video frames",
                   unit="frame", leave=False, disable=not self.progress or not process_state().is_local_main_process)
        try:
            for group in groups:
                if isinstance(group.pixels, InputError):
                    raise group.pixels
                if group.pixels is not None:
                    features = self._normalised_features(group.pixels).cpu()
                    repeats = torch.from_numpy(group.repeats)
                    parts.setdefault(group.position, []).append(features.repeat_interleave(repeats, dim=0))
                    bar.update(int(repeats.sum()))
                if group.last:
                    for category, message in group.warnings:
                        warnings.warn(category(message), stacklevel=user_stacklevel())
                    finished[group.position] = torch.cat(parts.pop(group.position)).numpy().reshape(-1)
                while next_position in finished:
                    yield [finished.pop(next_position)]
                    next_position += 1
        finally:
            bar.close()
            self.abandon()
        if next_position != count:
            raise RuntimeError(f"frame decoding ended after {next_position} of {count} videos")


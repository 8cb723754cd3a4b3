"""CLIP's two towers as row producers of the embedding engine, and the engine every CLIP-based scorer uses.

Images: each distinct image (by content hash) is decoded and transformed in the worker processes of a persistent
``torch.utils.data.DataLoader`` (:mod:`capeval.models.clip.decoding`), in groups of :data:`DECODE_GROUP` so that every worker has work whatever the batch
size; the groups of a batch are concatenated in order (into pinned memory on CUDA), so batches are exactly as
planned. Decoding starts when the engine requests the rows and runs ahead of the model by the loader's prefetch
depth. Groups travel as NumPy arrays through the loader's pipes rather than as tensors in shared memory: reading a
fresh shared-memory segment per group cost 20x more on a measured machine (60 ms against 2.7 ms per group of 8).

Texts: each distinct prepared text is tokenised once (token rows take texts the caller has tokenised), and texts are
batched by token length so padding stays short (in float32; reduced precision pads to the context, as the reference
does).

The on-disk namespace covers the model fingerprint, dtype, preprocessing and forward versions and the transform
settings (float32 rows keep the namespace they had before these producers existed).
"""
from __future__ import annotations

import multiprocessing
import os
from typing import Iterator, List, Mapping, NamedTuple, Optional, Sequence, Union

import numpy as np
import torch

from capeval.engine import Batch, EmbeddingEngine, Item, RowProducer, fixed_size_batches, to_rows
from capeval.inputs import ImageItem, InputError
from capeval.models.clip.decoding import DecodedImages, Groups, as_is, started_workers
from capeval.models.clip.loading import Backbone
from capeval.models.clip.modeling import forward_version
from capeval.models.clip.preprocessing import PREPROCESSING_VERSION, pad_token_ids
from capeval.processes import worker_context


def backbone_cache_key(backbone: Backbone, settings: str) -> str:
    """On-disk namespace key of rows computed by ``backbone`` under ``settings``."""
    return f"{backbone.fingerprint}|{backbone.dtype}|{PREPROCESSING_VERSION}|{forward_version(backbone.dtype)}|{settings}"


DECODE_GROUP = 8
"""Images decoded by one worker task (a batch is split into such groups, so small batches still use every worker)."""
PREFETCH_GROUPS = 4
"""Groups each worker decodes ahead of the model (the loader's ``prefetch_factor``)."""


def default_num_workers() -> int:
    """Decoding worker processes: the CPUs this process may use, shared among the processes of this machine
    (``LOCAL_WORLD_SIZE``, set by ``accelerate launch`` and ``torchrun``); 0 (decoding in this process) inside a
    daemonic process, which may not start any."""
    if multiprocessing.current_process().daemon:
        return 0
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cpus // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


class ImageRows(RowProducer[ImageItem]):
    """Projected image features (not normalised) of validated images, keyed by content hash.

    ``num_workers`` decoding processes (:func:`default_num_workers` when ``None``; 0 decodes in this process). They
    persist between requests and are shut down by :meth:`close`, when a request fails or is given up (an undecodable
    image, ``KeyboardInterrupt``), and when this producer is garbage collected.
    """

    kind = "image"

    def __init__(self, backbone: Backbone, batch_size: int, num_workers: Optional[int] = None) -> None:
        if batch_size < 1:
            raise ValueError("batch sizes must be positive")
        self.backbone = backbone
        self.batch_size = batch_size
        self.num_workers = num_workers if num_workers is not None else default_num_workers()
        self._loader: Optional[torch.utils.data.DataLoader] = None

    def key(self, item: ImageItem) -> str:
        return item.key

    def cache_key(self) -> str:
        return backbone_cache_key(self.backbone, self.backbone.image_transform.cache_settings())

    def plan(self, items: Mapping[str, ImageItem]) -> List[Batch]:
        return fixed_size_batches(items, self.batch_size)

    def encode(self, batches: List[List[ImageItem]]) -> Iterator[np.ndarray]:
        """Starts decoding every batch now (up to the prefetch depth); the returned iterator runs the model."""
        loader = self._open_loader()
        loader.batch_sampler.groups = [batch[start:start + DECODE_GROUP] for batch in batches
                                       for start in range(0, len(batch), DECODE_GROUP)]
        return self._encoded(started_workers(loader), [len(batch) for batch in batches])

    def close(self) -> None:
        """Shut the decoding workers down (a later request starts new ones)."""
        self._loader = None  # the loader holds the only reference to its worker iterator, whose deletion joins them

    def abandon(self) -> None:
        self.close()

    def _open_loader(self) -> torch.utils.data.DataLoader:
        if self._loader is None:
            workers = self.num_workers
            self._loader = torch.utils.data.DataLoader(
                DecodedImages(self.backbone.image_transform), batch_sampler=Groups(), num_workers=workers,
                collate_fn=as_is, persistent_workers=workers > 0,
                prefetch_factor=PREFETCH_GROUPS if workers > 0 else None,
                multiprocessing_context=worker_context() if workers > 0 else None)
        return self._loader

    def _encoded(self, groups: Iterator[Union[np.ndarray, InputError]], sizes: List[int]) -> Iterator[np.ndarray]:
        pin = self.backbone.device.type == "cuda"
        try:
            for size in sizes:
                parts: List[np.ndarray] = []
                while sum(map(len, parts)) < size:
                    group = next(groups)
                    if isinstance(group, InputError):
                        raise group
                    parts.append(group)
                pixels = torch.empty((size, *parts[0].shape[1:]), dtype=torch.uint8, pin_memory=pin)
                np.concatenate(parts, out=pixels.numpy())  # one thread: torch.cat's would wait for busy cores
                yield to_rows(self.backbone.encode_images(pixels))
        except BaseException:
            groups = iter(())  # drop this frame's reference to the worker iterator before closing
            self.close()
            raise


class _TextBatches(RowProducer[Item]):
    """What CLIP's text producers share: batches of texts of similar token length, and their padding."""

    def __init__(self, backbone: Backbone, batch_size: int) -> None:
        if batch_size < 1:
            raise ValueError("batch sizes must be positive")
        self.backbone = backbone
        self.batch_size = batch_size

    def _by_length(self, token_ids: Mapping[str, Sequence[int]]) -> List[Batch]:
        """Batches of texts (key -> token ids) of similar token length (payload: token ids), so padding stays
        short; texts of equal length keep their order."""
        ordered = sorted(token_ids, key=lambda key: len(token_ids[key]))
        return fixed_size_batches({key: token_ids[key] for key in ordered}, self.batch_size)

    def _padded(self, batch: List[List[int]]) -> torch.Tensor:
        """In float32 a batch is padded to its longest text; in reduced precision to the full context, as
        ``clip.tokenize`` pads, since there a matrix product's rounding of a row can depend on the padded length."""
        length = None if self.backbone.dtype == torch.float32 else self.backbone.text_transform.context_length
        return pad_token_ids(batch, length)


class TextRows(_TextBatches[str]):
    """Projected text features (not normalised) of prepared (prompted, cleaned) texts, keyed by the text."""

    kind = "text"

    def key(self, item: str) -> str:
        return item

    def cache_key(self) -> str:
        return backbone_cache_key(self.backbone, f"context={self.backbone.text_transform.context_length}")

    def plan(self, items: Mapping[str, str]) -> List[Batch]:
        """The texts tokenised, in batches of similar token length."""
        keys = list(items)
        return self._by_length(dict(zip(keys, self.backbone.text_transform.tokenize(keys))))

    def encode(self, batches: List[List[List[int]]]) -> Iterator[np.ndarray]:
        for batch in batches:
            yield to_rows(self.backbone.encode_texts(self._padded(batch)))


class TokenizedText(NamedTuple):
    """A prepared text and its token ids (:meth:`~capeval.models.clip.preprocessing.TextTransform.tokenize`)."""

    text: str
    token_ids: Sequence[int]


class TextTokenRows(_TextBatches[TokenizedText]):
    """Projected features (not normalised) of every token of prepared texts, from the start token to the end token:
    EMScore's ``encode_text(local=True)`` rows, keyed by the text; ragged rows ``(length * dim,)`` read with
    :meth:`~capeval.engine.EmbeddingEngine.row_list` (reshape to ``(-1, dim)``). The items come tokenised (the
    scorer needs the ids too, to weight the tokens), so planning does not tokenise them again."""

    kind = "text_tokens"

    def key(self, item: TokenizedText) -> str:
        return item.text

    def cache_key(self) -> str:
        return backbone_cache_key(self.backbone, f"tokens|context={self.backbone.text_transform.context_length}")

    def plan(self, items: Mapping[str, TokenizedText]) -> List[Batch]:
        """The texts in batches of similar token length."""
        return self._by_length({key: item.token_ids for key, item in items.items()})

    def encode(self, batches: List[List[List[int]]]) -> Iterator[List[np.ndarray]]:
        for batch in batches:
            states = to_rows(self.backbone.encode_text_tokens(self._padded(batch)))
            yield [states[row, :len(tokens)].reshape(-1) for row, tokens in enumerate(batch)]


class ClipEmbeddingEngine(EmbeddingEngine):
    """The engine of one CLIP backbone: image rows and text rows (and the rows of ``extra_producers``, for metrics
    that add their own rows to CLIP's)."""

    def __init__(
        self,
        backbone: Backbone,
        *,
        image_batch_size: int = 64,
        text_batch_size: int = 64,
        num_workers: Optional[int] = None,
        cache_dir: Union[str, "os.PathLike[str]", None] = None,
        memory_cache_bytes: int = 256 << 20,
        progress: bool = False,
        extra_producers: Sequence[RowProducer] = (),
    ) -> None:
        self.backbone = backbone
        super().__init__([ImageRows(backbone, image_batch_size, num_workers), TextRows(backbone, text_batch_size),
                          *extra_producers], cache_dir=cache_dir, memory_cache_bytes=memory_cache_bytes, progress=progress)

    @property
    def num_workers(self) -> int:
        """The image decoding worker processes (0: images are decoded in this process)."""
        image_rows = self.producers["image"]
        assert isinstance(image_rows, ImageRows)
        return image_rows.num_workers

    def image_features(self, images: Sequence[ImageItem]) -> np.ndarray:
        """Projected features of ``images``, one row per input (duplicates share their row)."""
        return self.rows("image", images)

    def text_features(self, prepared_texts: Sequence[str]) -> np.ndarray:
        """Projected features of prepared (prompted, cleaned) texts, one row per input."""
        return self.rows("text", list(prepared_texts))

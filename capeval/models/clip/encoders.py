"""CLIP's two towers as row producers of the embedding engine, and the engine every CLIP-based scorer uses.

Images: each distinct image (by content hash) is decoded and transformed in loader threads while the model runs on
the previous batch. Texts: each distinct prepared text is tokenised once, and texts are batched by token length so
padding stays short. The on-disk namespace covers the model fingerprint, dtype, preprocessing and forward versions
and the transform settings, exactly as before these producers existed, so earlier caches stay valid.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator, List, Mapping, Optional, Sequence, Union

import numpy as np
import torch

from capeval.engine import Batch, EmbeddingEngine, RowProducer, fixed_size_batches, to_rows
from capeval.inputs import ImageItem
from capeval.models.clip.loading import Backbone
from capeval.models.clip.modeling import FORWARD_VERSION
from capeval.models.clip.preprocessing import PREPROCESSING_VERSION, pad_token_ids


def _cache_key(backbone: Backbone, settings: str) -> str:
    return f"{backbone.fingerprint}|{backbone.dtype}|{PREPROCESSING_VERSION}|{FORWARD_VERSION}|{settings}"


class ImageRows(RowProducer[ImageItem]):
    """Projected image features (not normalised) of validated images, keyed by content hash."""

    kind = "image"

    def __init__(self, backbone: Backbone, batch_size: int, num_workers: Optional[int] = None) -> None:
        if batch_size < 1:
            raise ValueError("batch sizes must be positive")
        self.backbone = backbone
        self.batch_size = batch_size
        self.num_workers = num_workers if num_workers is not None else min(8, os.cpu_count() or 1)

    def key(self, item: ImageItem) -> str:
        return item.key

    def cache_key(self) -> str:
        return _cache_key(self.backbone, repr(self.backbone.image_transform))

    def plan(self, items: Mapping[str, ImageItem]) -> List[Batch]:
        return fixed_size_batches(items, self.batch_size)

    def encode(self, batches: List[List[ImageItem]]) -> Iterator[np.ndarray]:
        for pixels in self._decoded(batches):
            yield to_rows(self.backbone.encode_images(pixels))

    def _decoded(self, batches: List[List[ImageItem]]) -> Iterator[torch.Tensor]:
        """uint8 pixel batches; loader threads decode and transform the next batch while the model runs."""
        transform = self.backbone.image_transform
        pin = self.backbone.device.type == "cuda"
        with ThreadPoolExecutor(max_workers=self.num_workers) as pool:
            def submit(batch: List[ImageItem]) -> list:
                return [pool.submit(lambda item: transform.to_uint8(item.open()), item) for item in batch]

            pending = submit(batches[0]) if batches else []
            for position in range(len(batches)):
                current = pending
                if position + 1 < len(batches):
                    pending = submit(batches[position + 1])
                pixels = torch.stack([future.result() for future in current])
                yield pixels.pin_memory() if pin else pixels


class TextRows(RowProducer[str]):
    """Projected text features (not normalised) of prepared (prompted, cleaned) texts, keyed by the text."""

    kind = "text"

    def __init__(self, backbone: Backbone, batch_size: int) -> None:
        if batch_size < 1:
            raise ValueError("batch sizes must be positive")
        self.backbone = backbone
        self.batch_size = batch_size

    def key(self, item: str) -> str:
        return item

    def cache_key(self) -> str:
        return _cache_key(self.backbone, f"context={self.backbone.text_transform.context_length}")

    def plan(self, items: Mapping[str, str]) -> List[Batch]:
        """Batches of texts of similar token length (payload: token ids), so padding stays short."""
        keys = list(items)
        token_ids = dict(zip(keys, self.backbone.text_transform.tokenize(keys)))
        ordered = sorted(keys, key=lambda key: len(token_ids[key]))
        return fixed_size_batches({key: token_ids[key] for key in ordered}, self.batch_size)

    def encode(self, batches: List[List[List[int]]]) -> Iterator[np.ndarray]:
        for batch in batches:
            yield to_rows(self.backbone.encode_texts(pad_token_ids(batch)))


class ClipEmbeddingEngine(EmbeddingEngine):
    """The engine of one CLIP backbone: image rows and text rows."""

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
    ) -> None:
        self.backbone = backbone
        super().__init__([ImageRows(backbone, image_batch_size, num_workers), TextRows(backbone, text_batch_size)],
                         cache_dir=cache_dir, memory_cache_bytes=memory_cache_bytes, progress=progress)

    def image_features(self, images: Sequence[ImageItem]) -> np.ndarray:
        """Projected features of ``images``, one row per input (duplicates share their row)."""
        return self.rows("image", images)

    def text_features(self, prepared_texts: Sequence[str]) -> np.ndarray:
        """Projected features of prepared (prompted, cleaned) texts, one row per input."""
        return self.rows("text", list(prepared_texts))

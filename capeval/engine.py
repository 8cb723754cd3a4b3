"""The embedding engine shared by every CLIP-based metric.

Each distinct image (by content hash) and distinct prepared text is encoded once per backbone: rows come from the
in-memory cache, then the on-disk cache, and only the rest are encoded. Images are decoded and transformed in loader
threads while the model runs; texts are sorted by token length and padded per batch. Under ``accelerate launch`` the
batches to encode are dealt out over the processes and the features gathered back on every process. Batches are
formed from the whole request before they are dealt, so each item is encoded in the same batch, hence bit for bit
the same whatever the number of processes, as long as each process runs the same number of intra-op threads.
"""
from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Union

import numpy as np
import torch
from accelerate.utils import gather_object
from tqdm.auto import tqdm

from capeval.backbones import Backbone, process_state
from capeval.cache import DiskCache, MemoryCache
from capeval.inputs import ImageItem
from capeval.preprocessing import PREPROCESSING_VERSION, pad_token_ids
from capeval.towers import FORWARD_VERSION


class EmbeddingEngine:
    """Cached, batched, sharded feature extraction for one backbone."""

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
        if image_batch_size < 1 or text_batch_size < 1:
            raise ValueError("batch sizes must be positive")
        self.backbone = backbone
        self.image_batch_size = image_batch_size
        self.text_batch_size = text_batch_size
        self.num_workers = num_workers if num_workers is not None else min(8, os.cpu_count() or 1)
        self.progress = progress
        self.state = process_state()
        self._memory = {"image": MemoryCache(memory_cache_bytes), "text": MemoryCache(memory_cache_bytes)}
        self._disk: Dict[str, DiskCache] = {}
        if cache_dir is not None:
            for kind in ("image", "text"):
                self._disk[kind] = DiskCache(cache_dir, self.cache_namespace(kind))
        self.encoded = {"image": 0, "text": 0}
        """How many rows of each kind this engine has run through the model (for tests and reports)."""

    def cache_namespace(self, kind: str) -> str:
        """On-disk namespace: model fingerprint, precision, preprocessing and forward versions, settings, and kind."""
        backbone = self.backbone
        settings = repr(backbone.image_transform) if kind == "image" else f"context={backbone.text_transform.context_length}"
        digest = hashlib.blake2b(
            f"{backbone.fingerprint}|{backbone.dtype}|{PREPROCESSING_VERSION}|{FORWARD_VERSION}|{settings}".encode(),
            digest_size=12,
        ).hexdigest()
        return f"{kind}-{digest}"

    def image_features(self, images: Sequence[ImageItem]) -> np.ndarray:
        """Projected features of ``images``, one row per input (duplicates share their row)."""
        items: Dict[str, ImageItem] = {}
        for item in images:
            items.setdefault(item.key, item)

        def encode(batches: List[List[str]]) -> Iterator[np.ndarray]:
            for pixels in self._decoded([[items[key] for key in batch] for batch in batches]):
                yield self._to_numpy(self.backbone.encode_images(pixels))

        return self._features("image", [item.key for item in images], self._chunk_images, encode)

    def text_features(self, prepared_texts: Sequence[str]) -> np.ndarray:
        """Projected features of prepared (prompted, cleaned) texts, one row per input."""
        token_ids: Dict[str, List[int]] = {}

        def plan(keys: List[str]) -> List[List[str]]:
            """Batches of texts of similar token length, so padding stays short."""
            token_ids.update(zip(keys, self.backbone.text_transform.tokenize(keys)))
            ordered = sorted(keys, key=lambda key: len(token_ids[key]))
            size = self.text_batch_size
            return [ordered[start:start + size] for start in range(0, len(ordered), size)]

        def encode(batches: List[List[str]]) -> Iterator[np.ndarray]:
            for batch in batches:
                ids = pad_token_ids([token_ids[key] for key in batch])
                yield self._to_numpy(self.backbone.encode_texts(ids))

        return self._features("text", list(prepared_texts), plan, encode)

    def _features(
        self,
        kind: str,
        keys: List[str],
        plan: Callable[[List[str]], List[List[str]]],
        encode: Callable[[List[List[str]]], Iterator[np.ndarray]],
    ) -> np.ndarray:
        """Rows for ``keys``: memory cache, then disk cache, then the model for what is still missing."""
        unique = list(dict.fromkeys(keys))
        table = self._memory[kind].get_many(unique)
        missing = [key for key in unique if key not in table]
        disk = self._disk.get(kind)
        if disk is not None and missing:
            from_disk = disk.get_many(missing)
            self._memory[kind].put_many(from_disk)
            table.update(from_disk)
            missing = [key for key in missing if key not in table]
        if self.state.num_processes > 1:
            union = set().union(*gather_object([missing]))
            missing = [key for key in unique if key in union]
        if missing:
            computed = self._encode_sharded(kind, plan(missing), encode)
            self._memory[kind].put_many(computed)
            table.update(computed)
        return np.stack([table[key] for key in keys])

    def _encode_sharded(
        self, kind: str, batches: List[List[str]], encode: Callable[[List[List[str]]], Iterator[np.ndarray]]
    ) -> Dict[str, np.ndarray]:
        """Encode this process's share of ``batches`` (every ``num_processes``-th) and gather all rows everywhere."""
        rank, world = self.state.process_index, self.state.num_processes
        mine = batches[rank::world]
        computed: Dict[str, np.ndarray] = {}
        with tqdm(total=sum(map(len, mine)), desc=f"encoding {kind}s", unit=kind, leave=False,
                  disable=not self.progress or not self.state.is_local_main_process) as bar:
            for batch, features in zip(mine, encode(mine)):
                computed.update(zip(batch, features))
                bar.update(len(batch))
        self.encoded[kind] += len(computed)
        disk = self._disk.get(kind)
        if disk is not None and computed:
            disk.put_many(computed)
        if world > 1:
            for part in gather_object([computed]):
                computed.update(part)
        return computed

    def _chunk_images(self, keys: List[str]) -> List[List[str]]:
        size = self.image_batch_size
        return [keys[start:start + size] for start in range(0, len(keys), size)]

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

    def _to_numpy(self, features: torch.Tensor) -> np.ndarray:
        """fp16 features stay fp16 (the reference fp16 arithmetic continues in NumPy); others become float32."""
        if features.dtype == torch.float16:
            return features.cpu().numpy()
        return features.float().cpu().numpy()

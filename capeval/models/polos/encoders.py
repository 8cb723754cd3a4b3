"""Polos's rows in the shared embedding engine: sentence embeddings of captions (``polos_sentence``, keyed by the
caption as given), beside the CLIP image and prompted-caption rows of the checkpoint's CLIP (the same producers,
and on-disk caches, as CLIP-S).

Each distinct caption is tokenised once (the encoder's special tokens added, as the wheel's ``HFTextEncoder`` does)
and cut to the encoder's positions; captions are batched by token length so padding stays short.
"""
from __future__ import annotations

import os
from typing import Iterator, List, Mapping, Optional, Sequence, Union

import numpy as np
import torch

from capeval.engine import Batch, RowProducer, fixed_size_batches, to_rows
from capeval.models.clip.encoders import ClipEmbeddingEngine
from capeval.models.polos.loading import LoadedPolos

SENTENCE_VERSION = "1"
"""Changes whenever the sentence embedding could change for the same model; part of the on-disk cache key."""


def encoder_token_ids(polos: LoadedPolos, texts: Sequence[str]) -> List[List[int]]:
    """Token ids of ``texts`` with the encoder's special tokens, uncut."""
    return polos.tokenizer(list(texts), add_special_tokens=True, truncation=False)["input_ids"]


class SentenceRows(RowProducer[str]):
    """Polos sentence embeddings (float32 rows) of captions, keyed by the caption."""

    kind = "polos_sentence"

    def __init__(self, polos: LoadedPolos, batch_size: int) -> None:
        if batch_size < 1:
            raise ValueError("batch sizes must be positive")
        self.polos = polos
        self.batch_size = batch_size

    def key(self, item: str) -> str:
        return item

    def cache_key(self) -> str:
        return f"{self.polos.fingerprint}|{SENTENCE_VERSION}|max_tokens={self.polos.max_tokens}"

    def plan(self, items: Mapping[str, str]) -> List[Batch]:
        keys = list(items)
        limit = self.polos.max_tokens
        token_ids = {key: ids[:limit] for key, ids in zip(keys, encoder_token_ids(self.polos, keys))}
        ordered = sorted(keys, key=lambda key: len(token_ids[key]))
        return fixed_size_batches({key: token_ids[key] for key in ordered}, self.batch_size)

    def encode(self, batches: List[List[List[int]]]) -> Iterator[np.ndarray]:
        pad = self.polos.sentence_encoder.pad_token_id
        for batch in batches:
            lengths = torch.tensor([len(ids) for ids in batch])
            padded = torch.full((len(batch), int(lengths.max())), pad, dtype=torch.long)
            for row, ids in enumerate(batch):
                padded[row, :len(ids)] = torch.tensor(ids)
            device = self.polos.device
            yield to_rows(self.polos.sentence_encoder(padded.to(device), lengths.to(device)))


class PolosEngine(ClipEmbeddingEngine):
    """CLIP image and text rows of the checkpoint's CLIP, and Polos sentence embeddings."""

    def __init__(self, polos: LoadedPolos, *, image_batch_size: int = 64, text_batch_size: int = 64,
                 num_workers: Optional[int] = None, cache_dir: Union[str, "os.PathLike[str]", None] = None,
                 memory_cache_bytes: int = 256 << 20, progress: bool = False) -> None:
        super().__init__(polos.backbone, image_batch_size=image_batch_size, text_batch_size=text_batch_size,
                         num_workers=num_workers, cache_dir=cache_dir, memory_cache_bytes=memory_cache_bytes,
                         progress=progress, extra_producers=[SentenceRows(polos, text_batch_size)])

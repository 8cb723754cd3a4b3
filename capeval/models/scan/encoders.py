"""TIGEr's rows of the embedding engine, made with SCAN: the image encoder's embedding of an image's regions
(:class:`RegionEmbeddings`, keyed by the features' content), the text encoder's word embeddings of a caption
(:class:`WordEmbeddings`, keyed by its text), and the grounding vector of a (regions, caption) pair
(:class:`GroundingVectors`, :func:`capeval.functional.tigerscore.grounding`). Each is computed once per distinct
input and cached in memory and, with ``cache_dir``, on disk; the on-disk namespaces cover the model files (and the
vocabulary, and for groundings :data:`GROUNDING_VERSION` and the softmax temperature).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, List, Mapping

import numpy as np
import torch

from capeval.cache import text_key
from capeval.engine import Batch, RowProducer, fixed_size_batches, to_rows
from capeval.functional import tigerscore as functional
from capeval.models.regions.features import KeyedRegions
from capeval.models.scan.loading import LoadedScan

GROUNDING_VERSION = "1"
"""Bumped whenever the grounding arithmetic changes, so that old cached grounding vectors are not reused."""


class RegionEmbeddings(RowProducer[KeyedRegions]):
    """SCAN image-encoder output of an image's regions, flattened to one row of ``regions * embed_size``."""

    kind = "scan_regions"

    def __init__(self, scan: LoadedScan, batch_size: int) -> None:
        self.scan, self.batch_size = scan, batch_size

    def key(self, item: KeyedRegions) -> str:
        return item.key

    def cache_key(self) -> str:
        return f"{self.scan.fingerprint}|scan-image-encoder"

    def plan(self, items: Mapping[str, KeyedRegions]) -> List[Batch]:
        return fixed_size_batches(items, self.batch_size)

    def encode(self, batches: List[List[Any]]) -> Iterator[np.ndarray]:
        for batch in batches:
            features = torch.from_numpy(np.stack([item.regions.features for item in batch]))
            yield to_rows(self.scan.model.encode_regions(features.to(self.scan.device))).reshape(len(batch), -1)


class WordEmbeddings(RowProducer[str]):
    """SCAN text-encoder output of a caption: ``(words, embed_size)`` flattened to one row (``<start>``/``<end>``
    included), so rows differ in length."""

    kind = "scan_words"

    def __init__(self, scan: LoadedScan, batch_size: int) -> None:
        self.scan, self.batch_size = scan, batch_size

    def key(self, item: str) -> str:
        return text_key(item)

    def cache_key(self) -> str:
        return f"{self.scan.fingerprint}|scan-text-encoder|{self.scan.tokenizer.fingerprint}"

    def plan(self, items: Mapping[str, str]) -> List[Batch]:
        """Batches of captions of similar token count, so that the padded GRU batches stay short."""
        ids = {key: self.scan.tokenizer.encode(text) for key, text in items.items()}
        ordered = sorted(ids, key=lambda key: len(ids[key]))
        return [[(key, ids[key]) for key in ordered[start:start + self.batch_size]]
                for start in range(0, len(ordered), self.batch_size)]

    def encode(self, batches: List[List[Any]]) -> Iterator[List[np.ndarray]]:
        for batch in batches:
            yield [to_rows(words).reshape(-1) for words in self.scan.model.encode_token_ids(batch)]


@dataclass(frozen=True)
class GroundingPair:
    """A caption to ground in an image: the keys of both and their SCAN embeddings."""

    regions_key: str
    text_key: str
    regions: np.ndarray
    words: np.ndarray


class GroundingVectors(RowProducer[GroundingPair]):
    """Per-region grounding ``s_i`` of a caption in an image (float64,
    :func:`capeval.functional.tigerscore.grounding`)."""

    kind = "tiger_grounding"

    def __init__(self, scan: LoadedScan, batch_size: int) -> None:
        self.scan, self.batch_size = scan, batch_size

    def key(self, item: GroundingPair) -> str:
        return f"{item.regions_key}:{item.text_key}"

    def cache_key(self) -> str:
        return (f"{self.scan.fingerprint}|{self.scan.tokenizer.fingerprint}|grounding-{GROUNDING_VERSION}"
                f"|lambda_softmax={self.scan.config.lambda_softmax}")

    def plan(self, items: Mapping[str, GroundingPair]) -> List[Batch]:
        return fixed_size_batches(items, self.batch_size)

    def encode(self, batches: List[List[Any]]) -> Iterator[np.ndarray]:
        lambda_softmax = self.scan.config.lambda_softmax
        for batch in batches:
            yield np.stack([functional.grounding(pair.regions, pair.words, lambda_softmax) for pair in batch])

"""BRIDGE's rows in the shared embedding engine: template captions and t* are functions of the image alone, so both
are cached per image content hash (in memory, and on disk with ``cache_dir``).

* ``template``: the BLIP caption of the image (UTF-8 bytes as a ragged uint8 row); depends on the captioner and its
  decoding settings only, so retraining the mapping network reuses it. BLIP is loaded on the first miss.
* ``pseudo_caption``: t*, the mean pseudo-caption embedding (float64 row); depends on everything.

Images and candidate texts use CLIP's own producers (the same rows, and on-disk caches, as CLIP-S).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from capeval.engine import Batch, RowProducer, fixed_size_batches, to_rows
from capeval.functional.bridge import mean_pseudo_caption
from capeval.hub import folder_fingerprint
from capeval.inputs import ImageItem
from capeval.models.bridge.loading import LoadedBridge
from capeval.models.bridge.modeling import TemplateBatch
from capeval.models.bridge.configuration import TemplateConfig
from capeval.models.bridge.templates import BlipCaptioner, NounChunker, build_templates
from capeval.models.clip.encoders import ClipEmbeddingEngine, backbone_cache_key
from capeval.models.clip.modeling import FORWARD_VERSION

TEMPLATE_VERSION = "1"
"""Changes whenever template building could give other templates; part of the pseudo-caption cache key."""


def captioner_identity(config: TemplateConfig) -> str:
    """What determines the captions: the captioner (content hash of a local folder, else hub id and revision), its
    prompt and decoding settings."""
    folder = os.path.expanduser(config.captioner)
    source = (f"local-{folder_fingerprint(Path(folder))}" if os.path.isdir(folder)
              else f"{config.captioner}@{config.captioner_revision}")
    return f"{source}|{config.prompt!r}|{json.dumps(config.decoding(), sort_keys=True)}"


class TemplateRows(RowProducer[ImageItem]):
    """BLIP captions of images, keyed by content hash."""

    kind = "template"

    def __init__(self, config: TemplateConfig, device: torch.device, batch_size: int) -> None:
        self.config = config
        self.device = device
        self.batch_size = batch_size
        self._captioner: Optional[BlipCaptioner] = None

    @property
    def captioner(self) -> BlipCaptioner:
        if self._captioner is None:
            self._captioner = BlipCaptioner.load(self.config, self.device)
        return self._captioner

    def key(self, item: ImageItem) -> str:
        return item.key

    def cache_key(self) -> str:
        return captioner_identity(self.config)

    def plan(self, items: Mapping[str, ImageItem]) -> List[Batch]:
        return fixed_size_batches(items, self.batch_size)

    def encode(self, batches: List[List[ImageItem]]) -> Iterator[List[np.ndarray]]:
        for batch in batches:
            captions = self.captioner.caption([item.open().convert("RGB") for item in batch])
            yield [np.frombuffer(caption.encode("utf-8"), dtype=np.uint8) for caption in captions]


def decode_template_row(row: np.ndarray) -> str:
    return row.tobytes().decode("utf-8")


class PseudoCaptionRows(RowProducer[Tuple[ImageItem, str]]):
    """t* of (image, BLIP caption) pairs, keyed by the image's content hash."""

    kind = "pseudo_caption"

    def __init__(self, bridge: LoadedBridge, chunker: NounChunker, tagger_name: str, batch_size: int) -> None:
        self.bridge = bridge
        self.chunker = chunker
        self.tagger_name = tagger_name
        self.batch_size = batch_size
        self.without_chunks = 0
        """Images computed whose caption had no noun chunk (t* is then the caption's own embedding)."""

    def key(self, item: Tuple[ImageItem, str]) -> str:
        return item[0].key

    def cache_key(self) -> str:
        config = self.bridge.config
        settings = json.dumps({"bridge": self.bridge.fingerprint, "templates": config.templates.to_dict(),
                               "tagger": self.tagger_name, "normalize": config.normalize_before_mean,
                               "version": TEMPLATE_VERSION, "forward": FORWARD_VERSION}, sort_keys=True)
        return backbone_cache_key(self.bridge.backbone, settings)

    def plan(self, items: Mapping[str, Tuple[ImageItem, str]]) -> List[Batch]:
        return fixed_size_batches(items, self.batch_size)

    @torch.inference_mode()
    def encode(self, batches: List[List[Tuple[ImageItem, str]]]) -> Iterator[np.ndarray]:
        backbone, model, config = self.bridge.backbone, self.bridge.model, self.bridge.config
        for batch in batches:
            pixels = torch.stack([backbone.image_transform.to_uint8(image.open(), f"images[{image.index}] "
                                                                                  f"({image.label})")
                                  for image, _ in batch])
            values = backbone.image_transform.normalize(pixels.to(backbone.device)).to(backbone.dtype)
            templates, owner = [], []
            for index, (_, caption) in enumerate(batch):
                built = build_templates(caption, self.chunker, backbone.text_transform, config.templates.unit_size)
                self.without_chunks += built[0].chunk == ""
                templates.extend(built)
                owner.extend([index] * len(built))
            grid = model.image_grid(values)
            pseudo = to_rows(model.pseudo_caption_embeddings(grid, TemplateBatch.collate(templates, owner)
                                                             .to(backbone.device))).astype(np.float64)
            owner_array = np.asarray(owner)
            yield np.stack([mean_pseudo_caption(pseudo[owner_array == index], config.normalize_before_mean)
                            for index in range(len(batch))])


class BridgeEngine(ClipEmbeddingEngine):
    """Image and text rows of the CLIP backbone, BLIP templates and t* per image."""

    def __init__(self, bridge: LoadedBridge, chunker: NounChunker, tagger_name: str, *, image_batch_size: int = 64,
                 text_batch_size: int = 64, caption_batch_size: int = 16, num_workers: Optional[int] = None,
                 cache_dir: Union[str, "os.PathLike[str]", None] = None, memory_cache_bytes: int = 256 << 20,
                 progress: bool = False) -> None:
        self.pseudo_captions = PseudoCaptionRows(bridge, chunker, tagger_name, image_batch_size)
        templates = TemplateRows(bridge.config.templates, bridge.backbone.device, caption_batch_size)
        super().__init__(bridge.backbone, image_batch_size=image_batch_size, text_batch_size=text_batch_size,
                         num_workers=num_workers, cache_dir=cache_dir, memory_cache_bytes=memory_cache_bytes,
                         progress=progress, extra_producers=[templates, self.pseudo_captions])

    def templates(self, images: Sequence[ImageItem]) -> List[str]:
        """The BLIP caption of each image."""
        return [decode_template_row(row) for row in self.row_list("template", images)]

    def pseudo_caption_features(self, images: Sequence[ImageItem]) -> np.ndarray:
        """t* of each image (templates first, from the cache where possible)."""
        return self.rows("pseudo_caption", list(zip(images, self.templates(images))))


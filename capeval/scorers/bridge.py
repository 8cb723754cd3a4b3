"""BRIDGE (Sarto et al., ECCV 2024): validated inputs -> CLIP image and caption embeddings and t* per image (engine)
-> ``0.5 * (CLIP-S + w * max(cos(t*, c), 0))`` (:mod:`capeval.functional.bridge`).

The candidate is prompted and cleaned exactly as capeval's CLIP-S. References are not used (BRIDGE is
reference-free; the paper defines no reference-based variant).
"""
from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Dict, Iterable, Optional, Sequence, Tuple, Union

import numpy as np

from capeval.caller import user_stacklevel
from capeval.functional import bridge as functional
from capeval.inputs import ScoringItems, TextPosition, TruncationWarning
from capeval.models.bridge.encoders import BridgeEngine
from capeval.models.bridge.loading import load_bridge
from capeval.models.bridge.templates import NounChunker, Tagger
from capeval.options import check_scorer_options
from capeval.registry import FAMILIES
from capeval.runtime import DeviceLike
from capeval.scorers.base import Scorer, model_revision

PathLike = Union[str, "os.PathLike[str]"]


class BRIDGEScore(Scorer):
    """BRIDGE: CLIP-S joined by the similarity of the candidate to t*, the mean embedding of the image's
    pseudo-captions (BLIP template captions whose noun chunks a mapping network fills from CLIP's grid features).

    Args:
        model: hub id or local folder of a BRIDGE model (``config.json`` + ``model.safetensors``); the family's
            default model (capeval's BRIDGE on CLIP ViT-B/32) when ``None``.
        revision: hub revision of ``model``; capeval's pinned revision for known models when ``None``.
        device, precision, chunk_size: as every capeval scorer.
        batch_size: images per forward pass (texts use ``text_batch_size``, BLIP ``caption_batch_size``).
        cache_dir: folder of the on-disk cache of embeddings, templates and t*; none when ``None``.
        backbone: local folder of the CLIP backbone the model's config names (when it is not in the hub cache).
        captioner: hub id or local folder of the BLIP captioner, replacing the config's (recorded in the signature).
        tagger: part-of-speech tagger (words -> Penn Treebank tags); NLTK's averaged perceptron when ``None``.
        tagger_name: name of ``tagger`` in the signature and cache keys (default: its qualified name).
    """

    family = FAMILIES["bridge"]

    def __init__(
        self,
        model: Optional[PathLike] = None,
        revision: Optional[str] = None,
        device: DeviceLike = None,
        batch_size: int = 64,
        precision: str = "auto",
        cache_dir: Optional[PathLike] = None,
        *,
        text_batch_size: int = 64,
        caption_batch_size: int = 16,
        num_workers: Optional[int] = None,
        chunk_size: int = 1024,
        progress: bool = False,
        backbone: Optional[PathLike] = None,
        captioner: Optional[PathLike] = None,
        tagger: Optional[Tagger] = None,
        tagger_name: Optional[str] = None,
    ) -> None:
        check_scorer_options(batch_size=batch_size, text_batch_size=text_batch_size,
                             caption_batch_size=caption_batch_size, num_workers=num_workers)
        super().__init__(device, precision, chunk_size=chunk_size)
        self.bridge = load_bridge(model if model is not None else self.family.default_model, revision, self.device,
                                  self.precision, backbone=backbone)
        templates = self.bridge.config.templates
        if captioner is not None:
            templates = dataclasses.replace(templates, captioner=str(captioner), captioner_revision=None)
        if tagger is not None:
            templates = dataclasses.replace(templates, tagger=tagger_name or getattr(tagger, "__qualname__",
                                                                                     repr(tagger)))
        self.config = dataclasses.replace(self.bridge.config, templates=templates)
        self.bridge = dataclasses.replace(self.bridge, config=self.config)
        self.engine = BridgeEngine(self.bridge, NounChunker(templates.grammar, tagger), templates.tagger,
                                   image_batch_size=batch_size, text_batch_size=text_batch_size,
                                   caption_batch_size=caption_batch_size, num_workers=num_workers,
                                   cache_dir=cache_dir, progress=progress)

    def signature_fields(self) -> Sequence[Tuple[str, object]]:
        bridge, templates = self.bridge, self.config.templates
        return [("model", bridge.name), ("revision", model_revision(bridge)), ("backbone", bridge.backbone.name),
                ("backbone_revision", model_revision(bridge.backbone)), ("w", self.config.weight),
                ("prompt", repr(self.config.prompt)), ("normalize_before_mean", self.config.normalize_before_mean),
                ("captioner", templates.captioner), ("captioner_revision", templates.captioner_revision),
                ("captioner_prompt", repr(templates.prompt)),
                ("decoding", ",".join(f"{name}={value}" for name, value in templates.decoding().items())),
                ("grammar", repr(templates.grammar)), ("tagger", templates.tagger), ("unit_size", templates.unit_size)]

    def score(self, images: Iterable, candidates: Iterable[str],
              references: Optional[Iterable[Sequence[str]]] = None) -> Dict[str, object]:
        """Per-item and corpus BRIDGE; ``references`` must be ``None`` (BRIDGE does not use them)."""
        self.engine.pseudo_captions.without_chunks = 0
        result = super().score(images, candidates, references)
        count = self.engine.pseudo_captions.without_chunks
        if count:
            warnings.warn(f"{count} images have a template caption without noun chunks; their t* is the embedding of "
                          "the unmasked template caption", stacklevel=user_stacklevel())
        return result

    def truncation_warning(self, positions: Sequence[TextPosition]) -> TruncationWarning:
        return TruncationWarning(positions, self.bridge.backbone.text_transform.context_length)

    def _score_chunk(self, chunk: ScoringItems) -> Dict[str, np.ndarray]:
        text_transform = self.bridge.backbone.text_transform
        texts = text_transform.prepare(list(chunk.candidates), self.config.prompt)
        image_rows, text_rows = self.engine.rows_beside(("image", chunk.images), ("text", texts))
        images, captions = np.stack(image_rows).astype(np.float64), np.stack(text_rows).astype(np.float64)
        pseudo = self.engine.pseudo_caption_features(chunk.images)
        cut = text_transform.truncated(texts)
        self._record_truncated([position for position, was_cut in zip(chunk.text_positions(), cut) if was_cut])
        return {self.metric_name: functional.bridge_score(images, captions, pseudo, self.config.weight)}

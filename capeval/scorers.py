"""Stateful scorers: validated inputs -> embeddings (engine) -> per-item scores (functional core) -> result.

CLIP-S / RefCLIP-S and PAC-S / RefPAC-S are one scorer with two configurations (:class:`MetricSpec`): they differ
only in the backbone and the weight ``w``.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Iterable, List, Optional, Sequence, Type, Union

import numpy as np
import torch

from capeval.functional import clipscore as functional
from capeval.backbones import load_backbone, process_state
from capeval.engine import EmbeddingEngine
from capeval.inputs import ImageInput, ScoringItems, TextPosition, TruncationWarning, iter_scoring_items
from capeval.options import check_scorer_options, resolve_device
from capeval.version import __version__

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class MetricSpec:
    """What distinguishes one CLIP-based metric from another."""

    name: str
    ref_name: str
    label: str
    weight: float
    default_model: str
    accelerator_precision: str
    """The precision the reference code runs at on a GPU (on CPU both reference codes run fp32)."""
    prompt: str = "A photo depicts "


CLIP_S = MetricSpec("clip_score", "ref_clip_score", "CLIP-S", 2.5, "openai/clip-vit-base-patch32", "fp16")
PAC_S = MetricSpec("pac_score", "ref_pac_score", "PAC-S", 2.0, "capeval/pacs-clip-vit-b-32", "fp32")


def resolve_precision(precision: str, spec: MetricSpec, device: torch.device) -> str:
    """``"auto"`` becomes the reference code's precision on ``device``; other values pass through."""
    if precision != "auto":
        return precision
    return "fp32" if device.type == "cpu" else spec.accelerator_precision


class EmbeddingScorer:
    """Scores captions against images (and optionally references) with a CLIP backbone.

    Args:
        model: hub id or local folder of a converted CLIP model; the metric's default when ``None``.
        revision: hub revision; the pinned default for known models when ``None``.
        device: torch device; Accelerate's ``PartialState().device`` when ``None``.
        batch_size: images per forward pass (texts use ``text_batch_size``).
        precision: ``"auto"`` (default): what the reference code runs at on that device, i.e. fp32 on CPU; on an
            accelerator fp16 for CLIP-S (``clip.load`` on CUDA) and fp32 for PAC-S (its code calls ``.float()``).
            ``"fp32"``; ``"fp16"`` (the published CLIP-S arithmetic: fp16 model and fp16 NumPy scoring); ``"bf16"``.
        cache_dir: folder of the on-disk embedding cache; none when ``None``.
        num_workers: image loader threads.
        chunk_size: items validated and scored at a time, bounding memory for streamed (iterable) inputs.
        progress: show progress bars.
    """

    spec: ClassVar[MetricSpec]

    def __init__(
        self,
        model: Optional[PathLike] = None,
        revision: Optional[str] = None,
        device: Union[str, torch.device, None] = None,
        batch_size: int = 64,
        precision: str = "auto",
        cache_dir: Optional[PathLike] = None,
        *,
        text_batch_size: int = 64,
        num_workers: Optional[int] = None,
        chunk_size: int = 1024,
        progress: bool = False,
    ) -> None:
        check_scorer_options(batch_size=batch_size, text_batch_size=text_batch_size, num_workers=num_workers,
                             chunk_size=chunk_size)
        target = resolve_device(device) if device is not None else process_state().device
        self.precision = resolve_precision(precision, self.spec, target)
        self.chunk_size = chunk_size
        self.backbone = load_backbone(model if model is not None else self.spec.default_model, revision, target,
                                      self.precision)
        self.engine = EmbeddingEngine(self.backbone, image_batch_size=batch_size, text_batch_size=text_batch_size,
                                      num_workers=num_workers, cache_dir=cache_dir, progress=progress)

    @property
    def metric_name(self) -> str:
        return self.spec.name

    @property
    def ref_metric_name(self) -> str:
        return self.spec.ref_name

    @property
    def signature(self) -> str:
        """sacreBLEU-style statement of everything that determines the numbers."""
        backbone = self.backbone
        revision = backbone.revision if backbone.revision is not None else f"local-{backbone.fingerprint[:12]}"
        return (f"{self.spec.name}|model:{backbone.name}|revision:{revision}|w:{self.spec.weight}"
                f"|prompt:{self.spec.prompt!r}|precision:{self.precision}|capeval:{__version__}")

    def score(
        self,
        images: Iterable[ImageInput],
        candidates: Iterable[str],
        references: Optional[Iterable[Sequence[str]]] = None,
    ) -> Dict[str, Any]:
        """Per-item and corpus scores; reference-based scores too when ``references`` is given.

        Inputs may be sequences or iterables (consumed in chunks). Corpus values are means of per-item values.
        """
        image_scores: List[np.ndarray] = []
        reference_scores: List[np.ndarray] = []
        truncated: List[TextPosition] = []
        for chunk in iter_scoring_items(images, candidates, references, self.chunk_size):
            per_item, per_item_ref, chunk_truncated = self._score_chunk(chunk)
            image_scores.append(per_item)
            truncated.extend(chunk_truncated)
            if per_item_ref is not None:
                reference_scores.append(per_item_ref)
            del chunk  # release this chunk's images before the next one is read
        if truncated:
            warnings.warn(TruncationWarning(truncated, self.backbone.text_transform.context_length), stacklevel=2)
        result: Dict[str, Any] = self._summary(self.spec.name, np.concatenate(image_scores))
        if references is not None:
            result.update(self._summary(self.spec.ref_name, np.concatenate(reference_scores)))
        result["signature"] = self.signature
        return result

    @staticmethod
    def _summary(name: str, per_item: np.ndarray) -> Dict[str, Any]:
        return {name: float(np.mean(per_item)), f"{name}s": [float(value) for value in per_item]}

    def _score_chunk(self, chunk: ScoringItems) -> tuple:
        """(per-item image scores, per-item reference scores or None, positions of the truncated texts) of one chunk."""
        text_transform = self.backbone.text_transform
        raw = list(chunk.candidates)
        counts: List[int] = []
        for refs in chunk.references or ():
            raw.extend(refs)
            counts.append(len(refs))
        texts = text_transform.prepare(raw, self.spec.prompt)
        arithmetic = np.float16 if self.precision == "fp16" else np.float64
        image_features = self.engine.image_features(chunk.images).astype(arithmetic)
        text_features = self.engine.text_features(texts).astype(arithmetic)
        candidates = text_features[: len(chunk)]
        per_item = functional.clip_s(image_features, candidates, self.spec.weight)
        per_item_ref = None
        if chunk.references is not None:
            cosines = functional.max_reference_cosine(candidates, text_features[len(chunk):], counts)
            per_item_ref = functional.ref_clip_s(per_item, cosines)
        cut = text_transform.truncated(texts)
        return per_item, per_item_ref, [position for position, was_cut in zip(chunk.text_positions(), cut) if was_cut]


class CLIPScore(EmbeddingScorer):
    """CLIP-S and RefCLIP-S (Hessel et al., 2021): w = 2.5 on OpenAI CLIP ViT-B/32."""

    spec = CLIP_S


class PACScore(EmbeddingScorer):
    """PAC-S and RefPAC-S (Sarto et al., 2023): w = 2.0 on the PAC-S fine-tuned CLIP backbones."""

    spec = PAC_S


SCORERS: Dict[str, Type[EmbeddingScorer]] = {"clipscore": CLIPScore, "pacscore": PACScore}
"""Scorer class by metric family name (the names of the ``metrics/`` folders and the CLI's ``--metric``)."""

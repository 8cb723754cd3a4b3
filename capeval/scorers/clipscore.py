"""CLIP-S / RefCLIP-S and PAC-S / RefPAC-S: validated inputs -> CLIP embeddings (engine) -> per-item scores
(:mod:`capeval.functional.clipscore`).

The two metrics are one scorer with two families (:data:`capeval.registry.FAMILIES`): they differ only in the
backbone (each family's default model) and the weight ``w``. Their constructor (options, checks, the engine) is
:class:`ClipEngineScorer`'s, which Polos (:mod:`capeval.scorers.polos`) shares.
"""
from __future__ import annotations

import os
from abc import abstractmethod
from typing import Any, ClassVar, Dict, Iterable, Optional, Sequence, Tuple, Union

import numpy as np

from capeval.functional import clipscore as functional
from capeval.file_checks import FileChecks
from capeval.inputs import InputError, ScoringItems, TextPosition, TruncationWarning
from capeval.models.clip.encoders import ClipEmbeddingEngine
from capeval.models.clip.loading import Backbone, load_backbone
from capeval.options import check_scorer_options
from capeval.registry import FAMILIES
from capeval.runtime import DeviceLike, default_batch_size
from capeval.scorers.base import Scorer, model_revision

PathLike = Union[str, "os.PathLike[str]"]

IMAGE_BATCH_SIZE = 64
"""Images per forward pass by default, on every device: the batch of clipscore.py's and pacscore's
``extract_all_images``. On CUDA a product's kernel, hence its rounding, can depend on how many rows it multiplies, so
the reference's batch shape keeps per-item features equal to the reference's where the batches hold the same images
(one caption per image); a larger batch would buy nothing end to end, since a ViT-B/32 forward of 64 images (6,700
images/s in fp16 on an H100) outruns JPEG decoding on 16 processes (2,500 images/s)."""


class ClipEngineScorer(Scorer):
    """A scorer of one model whose rows come from a :class:`ClipEmbeddingEngine` (CLIP image and caption rows, and
    the model's own rows beside them): the options, their checks and the engine's construction, shared by CLIP-S,
    PAC-S and Polos. A subclass loads its model and builds its engine in :meth:`_load`.

    Args:
        model: hub id or local folder of a converted model; the family's default model when ``None``.
        revision: hub revision; the pinned default for known models when ``None``.
        device: torch device; Accelerate's ``PartialState().device`` when ``None``.
        batch_size: images per forward pass; when ``None``, :data:`IMAGE_BATCH_SIZE` on every device.
        text_batch_size: texts per forward pass; when ``None``, 64 on the CPU and 256 on an accelerator
            (:func:`capeval.runtime.default_batch_size`; 256 is the reference scripts' caption batch).
        precision: ``"auto"`` (default): what the reference code runs at on that device (fp32 on CPU,
            ``family.accelerator_precision`` on an accelerator); ``"fp32"``, ``"fp16"`` or ``"bf16"``.
        cache_dir: folder of the on-disk embedding cache; none when ``None``.
        num_workers: image decoding processes; ``None``: the CPUs of this process shared among the processes of
            the machine; 0: decode in this process.
        chunk_size: items validated and scored at a time, bounding memory for streamed (iterable) inputs.
        progress: show progress bars.
    """

    def __init__(
        self,
        model: Optional[PathLike] = None,
        revision: Optional[str] = None,
        device: DeviceLike = None,
        batch_size: Optional[int] = None,
        precision: str = "auto",
        cache_dir: Optional[PathLike] = None,
        *,
        text_batch_size: Optional[int] = None,
        num_workers: Optional[int] = None,
        chunk_size: int = 1024,
        progress: bool = False,
    ) -> None:
        check_scorer_options(batch_size=batch_size, text_batch_size=text_batch_size, num_workers=num_workers)
        super().__init__(device, precision, chunk_size=chunk_size)
        self.engine = self._load(
            model if model is not None else self.family.default_model, revision,
            image_batch_size=batch_size or IMAGE_BATCH_SIZE,
            text_batch_size=text_batch_size or default_batch_size(self.device),
            num_workers=num_workers, cache_dir=cache_dir, progress=progress)
        if self.engine.num_workers > 0:  # checking a file costs about a sixth of decoding it
            self.file_checks = FileChecks(max(1, self.engine.num_workers // 4))
        self._engine_options: Dict[str, Any] = {"cache_dir": cache_dir, "text_batch_size": text_batch_size,
                                                "num_workers": num_workers, "progress": progress}
        """The engine options as given, which a scorer of videos on the same backbone
        (``PACScore(...).score(videos=...)``) shares."""

    @abstractmethod
    def _load(self, model: PathLike, revision: Optional[str], **engine_options: Any) -> ClipEmbeddingEngine:
        """Load ``model`` at ``revision`` on :attr:`device` at :attr:`precision`, keep it on the scorer, and return
        its engine built with ``engine_options`` (the keyword arguments of :class:`ClipEmbeddingEngine`)."""


class EmbeddingScorer(ClipEngineScorer):
    """Scores captions against images (and optionally references) with a CLIP backbone; the arguments are
    :class:`ClipEngineScorer`'s, with ``precision="auto"`` on an accelerator fp16 for CLIP-S (``clip.load`` on CUDA)
    and fp32 for PAC-S (its code calls ``.float()``), and ``"fp16"`` the published CLIP-S arithmetic (fp16 model and
    fp16 NumPy scoring)."""

    weight: ClassVar[float]
    """``w`` of the metric."""
    prompt: ClassVar[str] = "A photo depicts "
    """Put before every caption, as both reference codes do."""
    backbone: Backbone
    """The CLIP backbone."""

    def _load(self, model: PathLike, revision: Optional[str], **engine_options: Any) -> ClipEmbeddingEngine:
        self.backbone = load_backbone(model, revision, self.device, self.precision)
        return ClipEmbeddingEngine(self.backbone, **engine_options)

    @property
    def ref_metric_name(self) -> str:
        """Name of the reference-based result (``ref_clip_score``), given with references."""
        return f"ref_{self.metric_name}"

    def signature_fields(self) -> Sequence[Tuple[str, object]]:
        return [("model", self.backbone.name), ("revision", model_revision(self.backbone)), ("w", self.weight),
                ("prompt", repr(self.prompt))]

    def truncation_warning(self, positions: Sequence[TextPosition]) -> TruncationWarning:
        return TruncationWarning(positions, self.backbone.text_transform.context_length)

    def _score_chunk(self, chunk: ScoringItems) -> Dict[str, np.ndarray]:
        """The texts are prepared and tokenised, then the images' decoding starts in the worker processes, and the
        texts are encoded here while it runs; then the images go through the model."""
        text_transform = self.backbone.text_transform
        raw, counts = chunk.texts()
        texts = text_transform.prepare(raw, self.prompt)
        image_rows, text_rows = self.engine.rows_beside(("image", chunk.images), ("text", texts))
        arithmetic = np.float16 if self.precision == "fp16" else np.float64
        image_features = np.stack(image_rows).astype(arithmetic)
        text_features = np.stack(text_rows).astype(arithmetic)
        candidates = text_features[: len(chunk)]
        scores = {self.metric_name: functional.clip_s(image_features, candidates, self.weight)}
        if chunk.references is not None:
            cosines = functional.max_reference_cosine(candidates, text_features[len(chunk):], counts)
            scores[self.ref_metric_name] = functional.ref_clip_s(scores[self.metric_name], cosines)
        cut = text_transform.truncated(texts)
        self._record_truncated([position for position, was_cut in zip(chunk.text_positions(), cut) if was_cut])
        return scores


class CLIPScore(EmbeddingScorer):
    """CLIP-S and RefCLIP-S (Hessel et al., 2021): w = 2.5 on OpenAI CLIP ViT-B/32."""

    family = FAMILIES["clipscore"]
    weight = 2.5


class PACScore(EmbeddingScorer):
    """PAC-S and RefPAC-S (Sarto et al., 2023): w = 2.0 on the PAC-S fine-tuned CLIP backbones; of videos too
    (``score(videos=..., candidates=..., references=...)``: EMScore's arithmetic on the same backbone, as the paper's
    Sec. 3.2 and its authors' code compute them; see :class:`~capeval.scorers.emscore.VideoPACScore`)."""

    family = FAMILIES["pacscore"]
    weight = 2.0
    _video_scorer: Optional[Scorer] = None
    """The scorer of videos on this backbone, made on first use."""

    def score(  # type: ignore[override]  # images become optional: videos may stand in for them
        self,
        images: Optional[Iterable[Any]] = None,
        candidates: Optional[Iterable[str]] = None,
        references: Optional[Iterable[Sequence[str]]] = None,
        *,
        videos: Optional[Iterable[Any]] = None,
    ) -> Dict[str, Any]:
        """PAC-S (and RefPAC-S with references) of captions for ``images``, or for ``videos`` (video files, frames or
        precomputed frame features, one per candidate; every frame, IDF from the references, else the candidates:
        for other settings use ``EMScore(model=...)`` with this backbone)."""
        if candidates is None:
            raise InputError("candidates are required: score(images, candidates) or score(videos=..., candidates=...)")
        if videos is None:
            if images is None:
                raise InputError("PAC-S needs images or videos: score(images, candidates) or "
                                 "score(videos=[...], candidates=[...])")
            return super().score(images, candidates, references)
        if images is not None:
            raise InputError("give images or videos, not both")
        if self._video_scorer is None:
            from capeval.scorers.emscore import VideoPACScore

            backbone = self.backbone
            self._video_scorer = VideoPACScore(
                backbone.name, backbone.revision, self.device, precision=self.precision, chunk_size=self.chunk_size,
                **self._engine_options)
        return self._video_scorer.pac_scores(videos, candidates, references)

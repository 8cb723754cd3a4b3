"""Polos (Wada et al., CVPR 2024): validated inputs -> sentence embeddings of candidate and references and CLIP
features of the image and the prompted captions (engine) -> the regressor, maximum over references
(:mod:`capeval.functional.polos`).

Scores equal the ``polos`` wheel's ``PolosEstimator.predict`` with ``batch_size=1``: the wheel normalises its layer
mix over the whole batch and keeps, for every item of a batch, only as many references as the item with the fewest,
so its scores at larger batch sizes depend on which items share a batch; capeval's do not.
"""
from __future__ import annotations

import os
import warnings
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from capeval.caller import user_stacklevel
from capeval.functional import polos as functional
from capeval.inputs import ScoringItems, TextPosition, TruncationWarning
from capeval.models.polos.encoders import PolosEngine, encoder_token_ids
from capeval.models.polos.loading import LoadedPolos, load_polos
from capeval.registry import FAMILIES
from capeval.scorers.base import model_revision
from capeval.scorers.clipscore import ClipEngineScorer

PathLike = Union[str, "os.PathLike[str]"]


class Polos(ClipEngineScorer):
    """Polos: a regressor trained on human judgments (Polaris) over SimCSE sentence embeddings of the candidate and
    each reference and CLIP ViT-B/32 features of the image and the prompted captions.

    Args:
        model: hub id or local folder of a converted Polos model (``conversion/convert_polos.py``); the family's
            default model (the authors' ``reprod`` checkpoint) when ``None``.
        revision: hub revision; capeval's pinned revision for known models when ``None``.
        device, precision, chunk_size: as every capeval scorer; ``precision`` applies to the CLIP towers (``"auto"``:
            fp16 on an accelerator, as the wheel's ``clip.load`` on CUDA); the sentence encoder and the regressor
            run in float32, as in the wheel.
        batch_size: images per forward pass (default 64).
        text_batch_size: captions per forward pass of either text encoder; 64 on the CPU, 256 on an accelerator.
        cache_dir: folder of the on-disk cache of image, caption and sentence rows; none when ``None``.
        num_workers: image decoding processes (see :class:`~capeval.scorers.clipscore.CLIPScore`).
        progress: show progress bars.
    """

    family = FAMILIES["polos"]

    polos: LoadedPolos
    """The loaded model: its sentence encoder, CLIP backbone and regressor."""
    _encoder_cut: List[TextPosition]
    """Positions of the texts of the current :meth:`score` call cut to the sentence encoder's positions."""

    def _load(self, model: PathLike, revision: Optional[str], **engine_options: Any) -> PolosEngine:
        self.polos = load_polos(model, revision, self.device, self.precision)
        return PolosEngine(self.polos, **engine_options)

    def signature_fields(self) -> Sequence[Tuple[str, object]]:
        config = self.polos.config
        return [("model", self.polos.name), ("revision", model_revision(self.polos)),
                ("prompt", repr(config.prompt)), ("layer", config.layer), ("pool", config.pool),
                ("statistics", "per-sentence")]

    def score(self, images: Iterable[Any], candidates: Iterable[str],
              references: Optional[Iterable[Sequence[str]]] = None) -> Dict[str, Any]:
        """Per-item and corpus Polos; references are required (the score is a maximum over them)."""
        self._encoder_cut = []
        result = super().score(images, candidates, references)
        if self._encoder_cut:
            shown = TruncationWarning(self._encoder_cut[:3], self.polos.max_tokens).describe().split(": ", 1)[1]
            more = len(self._encoder_cut) - 3
            count = len(self._encoder_cut)
            texts_exceed = "1 text exceeds" if count == 1 else f"{count} texts exceed"
            warnings.warn(f"{texts_exceed} the sentence encoder's {self.polos.max_tokens} tokens and "
                          f"{'was' if count == 1 else 'were'} cut to the first {self.polos.max_tokens} (the reference "
                          f"implementation fails on them): {shown}{f' and {more} more' if more > 0 else ''}",
                          stacklevel=user_stacklevel())
        return result

    def truncation_warning(self, positions: Sequence[TextPosition]) -> TruncationWarning:
        return TruncationWarning(positions, self.polos.backbone.text_transform.context_length)

    def _score_chunk(self, chunk: ScoringItems) -> Dict[str, np.ndarray]:
        text_transform = self.polos.backbone.text_transform
        raw, counts = chunk.texts()
        prompted = text_transform.prepare(raw, self.polos.config.prompt)
        image_rows, clip_rows, sentences = self.engine.rows_beside(
            ("image", chunk.images), ("text", prompted), ("polos_sentence", raw))
        image_rows, clip_rows, sentences = (np.stack(rows).astype(np.float64)
                                            for rows in (image_rows, clip_rows, sentences))
        size = len(chunk)
        scores = functional.polos_scores(sentences[:size], sentences[size:], image_rows, clip_rows[:size],
                                         clip_rows[size:], counts, self.polos.layers, self.polos.config.activations,
                                         self.polos.config.final_activation)
        positions = chunk.text_positions()
        self._record_truncated([position for position, cut in zip(positions, text_transform.truncated(prompted))
                                if cut])
        self._encoder_cut.extend(position for position, cut in zip(positions, self._over_encoder(raw)) if cut)
        return {self.metric_name: scores}

    def _over_encoder(self, texts: Sequence[str]) -> List[bool]:
        """Whether each text has more tokens than the encoder's positions hold (only texts with more UTF-8 bytes
        than that, less the two special tokens, are tokenised: a byte-level BPE token spans at least one byte)."""
        limit = self.polos.max_tokens
        long_texts = list(dict.fromkeys(text for text in texts if len(text.encode("utf-8")) > limit - 2))
        if not long_texts:
            return [False] * len(texts)
        cut = {text for text, ids in zip(long_texts, encoder_token_ids(self.polos, long_texts)) if len(ids) > limit}
        return [text in cut for text in texts]

"""EMScore (Shi et al., 2022) and video PAC-S / RefPAC-S (Sarto et al., 2023, Sec. 3.2): validated videos and
captions -> CLIP frame and token features (engine) -> per-item scores (:mod:`capeval.functional.emscore`).

The reference (``ShiYaya/emscore``) runs OpenAI CLIP ViT-B/32; the PAC-S authors ran the same code on their
fine-tuned CLIP. So one scorer serves both: :class:`EMScore` on any CLIP model, and :class:`VideoPACScore` (what
``PACScore().score(videos=...)`` runs) on the pacscore family's default model.

Captions are encoded as the reference's ``clip.tokenize`` (no prompt; over 77 tokens they are cut, keeping the end
token, where the reference raises) and ``encode_text(local=True)``; the IDF table is computed over the whole call
first (the references, else the candidates, or ``idf_corpus``), then items stream in chunks. The captions are
validated once, when the call reads them whole, and each distinct caption is cleaned and tokenised once per call
(:class:`CallTexts`): its ids serve the IDF table, the token weights, the batching of its token rows and the
truncation warning.
"""
from __future__ import annotations

import hashlib
import os
import warnings
from typing import Any, ClassVar, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple, Union

import numpy as np

from capeval.caller import user_stacklevel
from capeval.engine import EmbeddingEngine
from capeval.functional import emscore as functional
from capeval.inputs import InputError, ScoringItems, TextPosition, TruncationWarning, check_not_single, \
    iter_scoring_items, validate_caption, validate_references
from capeval.models.clip.encoders import TextTokenRows, TokenizedText
from capeval.models.clip.frames import VideoFrameRows
from capeval.models.clip.loading import load_backbone
from capeval.models.clip.preprocessing import TextTransform
from capeval.options import check_scorer_options
from capeval.registry import EMSCORE_VIEWS, FAMILIES
from capeval.runtime import DeviceLike, default_batch_size
from capeval.scorers.base import Scorer, model_revision
from capeval.frame_sampling import check_num_frames
from capeval.video import VideoInput, VideoItem, decoder_version, validate_video

PathLike = Union[str, "os.PathLike[str]"]

FRAME_BATCH_SIZE = 64
"""Frames per forward pass by default (the reference encodes up to 512 frames of a video at once; in float32 a
row's features do not depend on the batch beyond rounding)."""

RESULT_PREFIXES = {view: prefix for prefix, view in EMSCORE_VIEWS.items()}
"""The reference's view (``EMScore(X,V)``) -> capeval's result prefix (``emscore_video``)."""


def result_name(view: str, key: str) -> str:
    """capeval's result name of the reference's ``results[view][key]``: ``emscore_video_full_f``."""
    return f"{RESULT_PREFIXES[view]}_{key.lower()}"


class CallTexts:
    """The captions of one call, each distinct one cleaned (``prepare``, no prompt) and tokenised once: prepared
    texts and token ids are kept for the rest of the call."""

    def __init__(self, transform: TextTransform) -> None:
        self.transform = transform
        self._prepared: Dict[str, str] = {}
        self._token_ids: Dict[str, List[int]] = {}
        self._cut: Set[str] = set()

    def prepare(self, captions: Sequence[str]) -> List[str]:
        """The prepared text of each caption."""
        new = [caption for caption in dict.fromkeys(captions) if caption not in self._prepared]
        self._prepared.update(zip(new, self.transform.prepare(new, "")))
        return [self._prepared[caption] for caption in captions]

    def token_ids(self, prepared: Sequence[str]) -> List[List[int]]:
        """The token ids of each prepared text (cut as :meth:`TextTransform.tokenize` cuts)."""
        new = [text for text in dict.fromkeys(prepared) if text not in self._token_ids]
        if new:
            ids, cut = self.transform.tokenize_with_cuts(new)
            self._token_ids.update(zip(new, ids))
            self._cut.update(text for text, was_cut in zip(new, cut) if was_cut)
        return [self._token_ids[text] for text in prepared]

    def truncated(self, prepared: Sequence[str]) -> List[bool]:
        """Whether each prepared text, tokenised by :meth:`token_ids`, was cut to the context."""
        return [text in self._cut for text in prepared]


class EMScore(Scorer):
    """EMScore (Shi et al., 2022) of captions against videos, their references, or both.

    Args:
        model: hub id or local folder of a converted CLIP model; OpenAI CLIP ViT-B/32 (EMScore's) when ``None``.
            A PAC-S model (``capeval/pacs-clip-vit-b-32``) gives video PAC-S.
        revision: hub revision; the pinned default for known models when ``None``.
        device: torch device; Accelerate's ``PartialState().device`` when ``None``.
        batch_size: frames per forward pass (:data:`FRAME_BATCH_SIZE` when ``None``).
        precision: ``"auto"`` (the reference's: fp32 on CPU, fp16 on an accelerator for EMScore), ``"fp32"``,
            ``"fp16"`` or ``"bf16"``.
        cache_dir: folder of the on-disk cache of frame and token features; none when ``None``.
        idf: weight tokens by IDF (the reference's default); ``False``: every token weighs 1.
        idf_corpus: sentences to compute the IDF table from (VATEX-EVAL uses VATEX's training captions); ``None``:
            the call's references, else its candidates, as the reference does.
        num_frames: frames sampled from each video as VATEX-EVAL-demo.py samples them (``np.linspace(0, T - 1, n)``
            cast to int), also from precomputed features; ``None``: every frame (the reference's default). At most
            :data:`~capeval.frame_sampling.MAX_NUM_FRAMES` (10,000); a frame sampled several times is decoded and encoded once.
        text_batch_size: captions per forward pass (64 on the CPU, 256 on an accelerator when ``None``).
        num_workers: video decoding processes; ``None``: the CPUs of this process shared among the processes of
            the machine; 0: decode in this process.
        chunk_size: items validated and scored at a time, bounding memory for streamed (iterable) inputs.
        progress: show progress bars (of videos, and of their frames).
    """

    family = FAMILIES["emscore"]

    def __init__(
        self,
        model: Optional[PathLike] = None,
        revision: Optional[str] = None,
        device: DeviceLike = None,
        batch_size: Optional[int] = None,
        precision: str = "auto",
        cache_dir: Optional[PathLike] = None,
        *,
        idf: bool = True,
        idf_corpus: Optional[Sequence[str]] = None,
        num_frames: Optional[int] = None,
        text_batch_size: Optional[int] = None,
        num_workers: Optional[int] = None,
        chunk_size: int = 1024,
        progress: bool = False,
    ) -> None:
        check_scorer_options(batch_size=batch_size, text_batch_size=text_batch_size, num_workers=num_workers)
        check_num_frames(num_frames)
        if not isinstance(idf, bool):
            raise InputError(f"idf must be True or False, got {type(idf).__name__} {idf!r}; pass sentences as "
                             "idf_corpus=[...]")
        if idf_corpus is not None and not idf:
            raise InputError("idf_corpus is given but idf=False: drop one of them")
        super().__init__(device, precision, chunk_size=chunk_size)
        self.backbone = load_backbone(model if model is not None else self.family.default_model, revision,
                                      self.device, self.precision)
        self.idf = idf
        self.num_frames = num_frames
        self._corpus: Optional[Tuple[functional.IdfWeights, str]] = None
        if idf_corpus is not None:
            self._corpus = self._corpus_weights(idf_corpus)
        self.engine = EmbeddingEngine(
            [TextTokenRows(self.backbone, text_batch_size or default_batch_size(self.device)),
             VideoFrameRows(self.backbone, batch_size or FRAME_BATCH_SIZE, num_frames, num_workers, progress=progress)],
            cache_dir=cache_dir, progress=progress)
        self._weights = functional.UNIFORM
        self._idf_source = "none"
        self._texts = CallTexts(self.backbone.text_transform)
        self._defined: Dict[str, int] = {}
        self._decoded = False
        """Whether the last call decoded video files (its signature then records the decoder)."""

    # ---------------------------------------------------------------------------------------------------------------
    # Scoring
    # ---------------------------------------------------------------------------------------------------------------

    def score(  # type: ignore[override]  # videos in place of images; may be None when references are given
        self,
        videos: Optional[Iterable[VideoInput]],
        candidates: Iterable[str],
        references: Optional[Iterable[Sequence[str]]] = None,
    ) -> Dict[str, Any]:
        """Per-item and corpus scores of every view the inputs allow: ``emscore_video_*`` with ``videos``,
        ``emscore_refs_*`` with ``references``, ``emscore_video_refs_*`` with both (see the metric card for the
        reference's name of each key). Videos are streamed in chunks; captions are read whole first, for the IDF
        table."""
        if videos is None and references is None:
            raise InputError(f"{self.family.label} needs videos, references or both: pass score(videos, candidates) "
                             "or score(videos, candidates, references)")
        check_not_single("candidates", candidates, "a list of strings")
        candidates = [validate_caption(caption, f"candidates[{index}]") for index, caption in enumerate(candidates)]
        if references is not None:
            check_not_single("references", references, "a list of lists of strings")
            references = [validate_references(refs, index) for index, refs in enumerate(references)]
        try:
            self._weights, self._idf_source = self._call_weights(candidates, references)
            self._defined = {"equal_weights": 0, "zero_f": 0}
            self._decoded = False
            result = super().score([None] * len(candidates) if videos is None else videos, candidates, references)
        finally:
            self._texts = CallTexts(self.backbone.text_transform)  # the call's texts are not kept beyond it
        self._warn_defined()
        return result

    def _chunks(self, videos: Iterable[Any], candidates: Iterable[str],
                references: Optional[Iterable[Sequence[str]]]) -> Iterator[ScoringItems]:
        """Chunks of the videos validated, with the captions :meth:`score` validated already."""
        return iter_scoring_items(videos, candidates, references, self.chunk_size,
                                  validate_image_entry=self._validate_video, entries="videos",
                                  captions_validated=True)

    def _validate_video(self, video: Any, index: int) -> Optional[VideoItem]:
        if video is None:  # references only: score() put None for every item
            return None
        return validate_video(video, index, feature_dim=self.backbone.model.config.projection_dim)

    def _score_chunk(self, chunk: ScoringItems) -> Dict[str, np.ndarray]:
        """The captions are prepared and tokenised, then the videos' decoding starts in the worker processes, and the
        captions are encoded here while it runs."""
        videos: List[Optional[VideoItem]] = list(chunk.images)
        to_decode = [video for video in videos if video is not None and not video.is_features]
        self._decoded = self._decoded or bool(to_decode)
        texts = self._texts.prepare(chunk.texts()[0])
        distinct = list(dict.fromkeys(texts))  # an item's references recur in every item of its video
        token_ids = self._texts.token_ids(distinct)
        frame_rows, token_rows = self.engine.rows_beside(
            (VideoFrameRows.kind, to_decode), (TextTokenRows.kind, list(map(TokenizedText, distinct, token_ids))))
        captions = {text: self._caption(row, ids) for text, row, ids in zip(distinct, token_rows, token_ids)}
        decoded = dict(zip((video.key for video in to_decode), frame_rows))
        dim = self.backbone.model.config.projection_dim
        items: List[functional.ItemScores] = []
        position = len(chunk)
        for index, (video, candidate) in enumerate(zip(videos, texts)):
            target = None
            if video is not None:
                frames = video.features(self.num_frames).features if video.is_features else \
                    decoded[video.key].reshape(-1, dim)
                target = functional.video(frames)
            refs = None
            if chunk.references is not None:
                count = len(chunk.references[index])
                refs = [captions[text] for text in texts[position:position + count]]
                position += count
            items.append(functional.item_scores(captions[candidate], target, refs))
        scores = functional.collect(items)
        self._defined["equal_weights"] += scores.equal_weight_items
        self._defined["zero_f"] += scores.zero_f_items
        cut = self._texts.truncated(texts)
        self._record_truncated([where for where, was_cut in zip(chunk.text_positions(), cut) if was_cut])
        return {result_name(view, key): values for view, by_key in scores.scores.items()
                for key, values in by_key.items()}

    def _caption(self, row: np.ndarray, token_ids: List[int]) -> functional.Caption:
        """A caption's unit token rows, pooled row and weights, in float32 as the reference's ``.float()`` rows."""
        tokens = row.astype(np.float32).reshape(len(token_ids), -1)
        return functional.caption(tokens, self._weights(token_ids))

    # ---------------------------------------------------------------------------------------------------------------
    # IDF
    # ---------------------------------------------------------------------------------------------------------------

    def _corpus_weights(self, corpus: Sequence[str]) -> Tuple[functional.IdfWeights, str]:
        """The IDF table of a user corpus and its signature entry (``corpus-<count>-<digest>``)."""
        check_not_single("idf_corpus", corpus, "a list of sentences")
        sentences = [validate_caption(sentence, f"idf_corpus[{index}]") for index, sentence in enumerate(corpus)]
        if not sentences:
            raise InputError("idf_corpus is empty; give at least one sentence")
        digest = hashlib.blake2b("\n".join(sentences).encode(), digest_size=6).hexdigest()
        transform = self.backbone.text_transform
        return functional.idf_weights(transform.tokenize(transform.prepare(sentences, ""))), \
            f"corpus-{len(sentences)}-{digest}"

    def _call_weights(self, candidates: Sequence[str],
                      references: Optional[Sequence[Sequence[str]]]) -> Tuple[functional.IdfWeights, str]:
        """The token weights of one call and where they come from: uniform without IDF, the user corpus, else the
        call's references (every reference of every item, repeats counted), else its candidates."""
        if not self.idf:
            return functional.UNIFORM, "none"
        if self._corpus is not None:
            return self._corpus
        if references is not None:
            return functional.idf_weights(self._call_token_ids([ref for refs in references for ref in refs])), \
                "references"
        return functional.idf_weights(self._call_token_ids(candidates)), "candidates"

    def _call_token_ids(self, captions: Sequence[str]) -> List[List[int]]:
        """``clip.tokenize``'s ids of the call's ``captions`` from the start to the end token (cut as captions are
        cut), one list per caption (repeats included)."""
        return self._texts.token_ids(self._texts.prepare(captions))

    # ---------------------------------------------------------------------------------------------------------------
    # Reporting
    # ---------------------------------------------------------------------------------------------------------------

    def signature_fields(self) -> Sequence[Tuple[str, object]]:
        """The decoder only where the call decoded video files (frame features and frames in memory need none)."""
        decoder = [("decoder", decoder_version())] if self._decoded else []
        return [("model", self.backbone.name), ("revision", model_revision(self.backbone)), ("idf", self._idf_source),
                ("frames", "all" if self.num_frames is None else self.num_frames), *decoder]

    def truncation_warning(self, positions: Sequence[TextPosition]) -> TruncationWarning:
        return TruncationWarning(positions, self.backbone.text_transform.context_length)

    def _warn_defined(self) -> None:
        """One warning per kind of item the reference scores as NaN (module doc of :mod:`capeval.functional.emscore`)."""
        zero_f, equal_weights = self._defined["zero_f"], self._defined["equal_weights"]
        if zero_f:
            warnings.warn(f"{_items(zero_f)} fine-grained P + R = 0, where the reference's F is NaN; figr_F is 0 "
                          "there", RuntimeWarning, stacklevel=user_stacklevel())
        if equal_weights:
            source = "idf_corpus" if self._idf_source.startswith("corpus-") else f"the call's {self._idf_source}"
            warnings.warn(f"{_items(equal_weights)} a caption whose IDF weights sum to 0, where the reference's scores "
                          f"are NaN; its tokens were weighted equally. The IDF table came from {source}, whose every "
                          "sentence holds the same tokens (as one candidate alone does): weigh tokens equally on "
                          "purpose with idf=False (--no-idf), or give a corpus of many sentences with "
                          "idf_corpus=[...] (--idf-corpus FILE)", RuntimeWarning, stacklevel=user_stacklevel())


def _items(count: int) -> str:
    return "1 item has" if count == 1 else f"{count} items have"


class VideoPACScore(EMScore):
    """Video PAC-S and RefPAC-S: EMScore's arithmetic on the PAC-S CLIP (the pacscore family's default model), as the
    PAC-S authors computed them; ``PACScore().score(videos=...)`` runs it and reports ``pac_score`` (EMScore(X,V)
    ``full_F``) and ``ref_pac_score`` (EMScore(X,V,X*) ``full_F``)."""

    family = FAMILIES["pacscore"]
    video_results: ClassVar[Dict[str, str]] = {"pac_score": result_name("EMScore(X,V)", "full_F"),
                                               "ref_pac_score": result_name("EMScore(X,V,X*)", "full_F")}
    """PAC-S result -> the EMScore result it is."""

    def pac_scores(self, videos: Iterable[VideoInput], candidates: Iterable[str],
                   references: Optional[Iterable[Sequence[str]]] = None) -> Dict[str, Any]:
        """``pac_score`` / ``pac_scores`` and, with references, ``ref_pac_score`` / ``ref_pac_scores``, and the
        signature."""
        if videos is None:
            raise InputError("video PAC-S needs videos=[...], one video per candidate")
        result = self.score(videos, candidates, references)
        renamed: Dict[str, Any] = {}
        for name, source in self.video_results.items():
            if source in result:
                renamed[name], renamed[f"{name}s"] = result[source], result[f"{source}s"]
        renamed["signature"] = result["signature"]
        return renamed

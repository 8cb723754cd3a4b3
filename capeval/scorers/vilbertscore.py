"""ViLBERTScore (Lee et al., 2020): region features + captions -> ViLBERT text states -> greedy token matching
(:mod:`capeval.functional.vilbertscore`).

The reference runs one forward pass per text over the item's image: the candidate once, then each reference. Here
the text states of each distinct (image regions, text) are rows of the shared engine
(:class:`capeval.models.vilbert.encoders.TextStates`): computed once, texts of any images batched together, kept in
memory and, with ``cache_dir``, on disk (a sweep of candidates over the same references encodes the references once),
and dealt over the processes under ``accelerate launch``. A chunk's rows are requested together; each image's pairs
are then matched in one batch.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from capeval.cache import text_key
from capeval.caller import user_stacklevel
from capeval.engine import EmbeddingEngine
from capeval.functional import vilbertscore as functional
from capeval.inputs import (ImageItem, InputError, ScoringItems, TextPosition, TruncationWarning,
                            iter_scoring_items, validate_image)
from capeval.models.regions.extraction import RegionExtractor
from capeval.models.regions.features import KeyedRegions, KeyedRegionsMemo, RegionFeatures
from capeval.models.vilbert.encoders import TextOnRegions, TextStates
from capeval.models.vilbert.loading import LoadedVilbert, load_vilbert
from capeval.models.vilbert.tokenization import MAX_LENGTH
from capeval.options import check_scorer_options
from capeval.registry import FAMILIES
from capeval.runtime import DeviceLike
from capeval.scorers.base import Scorer, model_revision

PathLike = Union[str, "os.PathLike[str]"]
RegionSource = Union[None, str, "os.PathLike[str]", RegionExtractor, Callable[[Any], RegionFeatures]]

TASK_RETRIEVAL_COCO = 7
"""The task token the reference uses with the 12-in-1 model (``--task 7``, RetrievalCOCO)."""
NUM_REGIONS = 100
"""Detector boxes per image in the reference (the global mean region is added on top)."""


@dataclass(frozen=True)
class UnresolvedEntry:
    """An image entry whose regions the ``regions=`` function gives (called when its chunk is scored)."""

    value: Any
    index: int


class ViLBERTScore(Scorer):
    """ViLBERTScore P, R and F per item (means over the item's references) and their corpus means.

    Args:
        model: hub id or local folder of a converted ViLBERT (``conversion/convert_vilbert.py``); the family's
            default model (the 12-in-1 trunk) when ``None``.
        revision: hub revision; capeval's pinned default for known models when ``None``.
        device: torch device; Accelerate's ``PartialState().device`` when ``None``.
        batch_size: texts per forward pass.
        precision: ``"auto"`` (fp32, as the reference on CPU and GPU), ``"fp32"``, ``"fp16"`` or ``"bf16"``.
        cache_dir: folder of the on-disk cache of text states (and of the default detector's regions); none when
            ``None``.
        task_id: task token id for models with task tokens (7, RetrievalCOCO, as the reference).
        layer: which co-attention block's text output to match (-1, the last, as the reference).
        num_regions: detector regions each image must have (100, as the reference).
        regions: where the regions of image entries (not :class:`RegionFeatures`) come from: a
            :class:`~capeval.models.regions.extraction.RegionExtractor`, or a function from an image to
            :class:`RegionFeatures`; by default ViLBERT's detector (``family_detector(FAMILIES["vilbertscore"])``,
            100 boxes as the reference's feature files), loaded when an image entry first needs it, from its hub
            model or from the hub id or folder of converted weights that ``regions`` names. The result signature
            records what made the regions when that is known (``detector:...``, as :class:`~capeval.TIGErScore`).
        chunk_size: items validated and scored at a time; a chunk's text states are held together (float32,
            ``(wordpieces + 2) * hidden_size * 4`` bytes per text with a task token, ``+ 1`` without: 43 kB for 12
            wordpieces on the 12-in-1 model); with images, a chunk's distinct images are detected together.
        progress: show a progress bar of the texts encoded.
    """

    family = FAMILIES["vilbertscore"]

    def __init__(
        self,
        model: Optional[PathLike] = None,
        revision: Optional[str] = None,
        device: DeviceLike = None,
        batch_size: int = 64,
        precision: str = "auto",
        cache_dir: Optional[PathLike] = None,
        *,
        task_id: int = TASK_RETRIEVAL_COCO,
        layer: int = -1,
        num_regions: int = NUM_REGIONS,
        regions: RegionSource = None,
        chunk_size: int = 1024,
        progress: bool = False,
    ) -> None:
        check_scorer_options(batch_size=batch_size, num_regions=num_regions)
        super().__init__(device, precision, chunk_size=chunk_size)
        self.vilbert: LoadedVilbert = load_vilbert(model if model is not None else self.family.default_model,
                                                   revision, self.device, self.precision)
        config = self.vilbert.model.config
        if not -len(config.t_biattention_id) <= layer < len(config.t_biattention_id):
            raise ValueError(f"layer must index one of the {len(config.t_biattention_id)} co-attention blocks")
        if not (regions is None or isinstance(regions, (str, os.PathLike, RegionExtractor)) or callable(regions)):
            raise InputError(f"regions must be None (ViLBERT's detector), the hub id or folder of a detector, a "
                             f"RegionExtractor or a function from an image entry to RegionFeatures; got "
                             f"{type(regions).__name__} {regions!r:.60}")
        self.task_id = task_id if config.task_specific_tokens else None
        self.layer = layer
        self.num_regions = num_regions
        self.regions = regions
        self.cache_dir = cache_dir
        self.engine = EmbeddingEngine([TextStates(self.vilbert, batch_size, self.task_id, layer)],
                                      cache_dir=cache_dir, progress=progress)
        self._keyed = KeyedRegionsMemo(feature_dim=config.v_feature_size, num_regions=num_regions, needs_boxes=True)
        self._undefined_f1 = 0

    def signature_fields(self) -> Sequence[Tuple[str, object]]:
        fields = [("model", self.vilbert.name), ("revision", model_revision(self.vilbert)), ("task", self.task_id),
                  ("layer", self.layer), ("max_len", MAX_LENGTH), ("regions", f"{self.num_regions}+global"),
                  ("refs", "mean")]
        sources = self._keyed.sources()
        return fields if sources is None else [*fields, ("detector", sources)]

    def truncation_warning(self, positions: Sequence[TextPosition]) -> TruncationWarning:
        return TruncationWarning(positions, MAX_LENGTH, rule="cutting the tail, [SEP] included")

    def score(self, images: Iterable[Any], candidates: Iterable[str],
              references: Optional[Iterable[Sequence[str]]] = None) -> Dict[str, Any]:
        self._undefined_f1 = 0
        self._keyed.reset()
        result = super().score(images, candidates, references)
        if self._undefined_f1:
            warnings.warn(f"{self._undefined_f1} (candidate, reference) pairs have P + R = 0; their F is 0 "
                          "(the reference implementation gives NaN)", stacklevel=user_stacklevel())
        return result

    def validate_entry(self, entry: Any, index: int) -> Union[KeyedRegions, ImageItem, UnresolvedEntry]:
        """Check an image entry (in the validation threads, one chunk ahead): region features validated and hashed
        once per distinct object; images validated for the detector; entries for a ``regions=`` function kept for
        it. Regions of images are made in :meth:`_score_chunk`, on the scoring thread, a chunk at a time."""
        if isinstance(entry, RegionFeatures):
            return self._keyed(entry, index)
        if self.regions is None or isinstance(self.regions, (str, os.PathLike, RegionExtractor)):
            return validate_image(entry, index)
        return UnresolvedEntry(entry, index)

    def _keyed_regions(self, entries: Sequence[Union[KeyedRegions, ImageItem, UnresolvedEntry]]) -> List[KeyedRegions]:
        """The regions of a chunk's image entries: detected in one batch for images (ViLBERT's detector,
        ``x152-fpn``, is loaded when an image first needs it, so precomputed regions never load it), from the
        ``regions=`` function for the other entries."""
        images = [entry for entry in entries if isinstance(entry, ImageItem)]
        detected: Dict[int, KeyedRegions] = {}
        if images:
            if not isinstance(self.regions, RegionExtractor):  # None or the hub id / folder of the detector
                from capeval.models.regions.detectors import family_detector  # the table only where one loads

                detector = family_detector(self.family)
                self.regions = RegionExtractor(detector.load(self.regions, device=self.device, parameter="regions"),
                                               detector.settings, cache_dir=self.cache_dir)
            assert isinstance(self.regions, RegionExtractor)
            for image, regions in zip(images, self.regions.region_features(images)):
                detected[image.index] = self._keyed(regions, image.index)
        return [detected[entry.index] if isinstance(entry, ImageItem)
                else self._from_function(entry) if isinstance(entry, UnresolvedEntry) else entry
                for entry in entries]

    def _from_function(self, entry: UnresolvedEntry) -> KeyedRegions:
        """Regions of one entry from the ``regions=`` function, checked."""
        assert callable(self.regions)
        try:
            regions = self.regions(entry.value)
        except InputError as error:
            raise InputError(f"images[{entry.index}]: {error}") from None
        if not isinstance(regions, RegionFeatures):
            raise InputError(f"images[{entry.index}]: the regions= extractor returned a {type(regions).__name__}, "
                             "not RegionFeatures")
        return self._keyed(regions, entry.index)

    def _chunks(self, images: Iterable[Any], candidates: Iterable[str],
                references: Optional[Iterable[Sequence[str]]]) -> Iterator[ScoringItems]:
        return iter_scoring_items(images, candidates, references, self.chunk_size,
                                  validate_image_entry=self.validate_entry)

    def _score_chunk(self, chunk: ScoringItems) -> Dict[str, np.ndarray]:
        assert chunk.references is not None  # references are required
        texts_in_order = [*chunk.candidates, *(ref for refs in chunk.references for ref in refs)]
        distinct_texts = list(dict.fromkeys(texts_in_order))
        input_ids, attention_mask, truncated = self.vilbert.tokenizer.encode(distinct_texts)
        text_row = {text: row for row, text in enumerate(distinct_texts)}
        self._record_truncated([position for position, text in zip(chunk.text_positions(), texts_in_order)
                                if truncated[text_row[text]]])

        entries = self._keyed_regions(chunk.images)
        items_of_image: Dict[str, List[int]] = {}
        texts_of_image: Dict[str, Dict[str, None]] = {}
        for item, (regions, candidate, refs) in enumerate(zip(entries, chunk.candidates, chunk.references)):
            items_of_image.setdefault(regions.key, []).append(item)
            texts_of_image.setdefault(regions.key, {}).update(dict.fromkeys((candidate, *refs)))
        regions_of_image = {regions.key: regions for regions in entries}
        pairs = [TextOnRegions(regions_of_image[image], text_key(text), input_ids[text_row[text]],
                               attention_mask[text_row[text]])
                 for image, texts in texts_of_image.items() for text in texts]
        rows = iter(self.engine.row_list(TextStates.kind, pairs))
        hidden = self.vilbert.model.config.hidden_size
        results = np.zeros((3, len(chunk)), dtype=np.float32)
        for image, texts in texts_of_image.items():
            states = {text: next(rows).reshape(-1, hidden) for text in texts}
            self._match(chunk, items_of_image[image], states, attention_mask, text_row, results)
        self._keyed.clear()
        return dict(zip(self.family.result_keys, results))

    def _match(self, chunk: ScoringItems, items: List[int], states: Dict[str, np.ndarray], attention_mask: np.ndarray,
               text_row: Dict[str, int], results: np.ndarray) -> None:
        """P, R, F of ``items`` (all on one image, whose leading text states are ``states``) into ``results``; pairs
        are matched in one batch."""
        has_task = self.task_id is not None
        length = attention_mask.shape[1] + int(has_task)
        candidates, references, counts = [], [], []
        for item in items:
            refs = chunk.references[item]
            candidates.extend([chunk.candidates[item]] * len(refs))
            references.extend(refs)
            counts.append(len(refs))
        weights = functional.window_weights(attention_mask, has_task)
        precision, recall, f1 = functional.greedy_match(
            functional.padded_states([states[text] for text in candidates], length),
            functional.padded_states([states[text] for text in references], length),
            weights[[text_row[text] for text in candidates]], weights[[text_row[text] for text in references]])
        self._undefined_f1 += int(np.count_nonzero(precision + recall == 0))
        for row, values in enumerate((precision, recall, f1)):
            results[row, items] = functional.average_over_references(values, counts)

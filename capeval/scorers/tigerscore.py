"""TIGEr (Jiang et al., 2019): region features and captions -> SCAN embeddings and grounding vectors (engine,
:mod:`capeval.models.scan.encoders`) -> per-item RRS, WDS and TIGEr (:mod:`capeval.functional.tigerscore`).

Three kinds of rows go through the shared engine, each computed once per distinct input and cached in memory and,
with ``cache_dir``, on disk: the SCAN embedding of an image's regions (keyed by the features' content), the word
embeddings of a caption (keyed by its text), and the grounding vector of a (regions, caption) pair.
"""
from __future__ import annotations

import os
import warnings
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from capeval.cache import text_key
from capeval.caller import user_stacklevel
from capeval.engine import EmbeddingEngine
from capeval.functional import tigerscore as functional
from capeval.inputs import ImageItem, InputError, ScoringItems, iter_scoring_items, validate_image
from capeval.models.regions.configuration import ExtractionSettings
from capeval.models.regions.extraction import RegionExtractor
from capeval.models.regions.features import KeyedRegions, KeyedRegionsMemo, RegionFeatures
from capeval.models.scan.encoders import GroundingPair, GroundingVectors, RegionEmbeddings, WordEmbeddings
from capeval.models.scan.loading import load_scan
from capeval.options import check_scorer_options
from capeval.registry import FAMILIES
from capeval.runtime import DeviceLike
from capeval.scorers.base import Scorer, model_revision

PathLike = Union[str, "os.PathLike[str]"]
RegionSource = Union[None, str, "os.PathLike[str]", Callable[[List[Any]], List[RegionFeatures]]]
"""Where region features of image entries come from: a detector hub id or folder, or a callable (see TIGErScore)."""

NUM_REGIONS = 36
"""Regions per image in TIGEr: the 36 fixed boxes of the bottom-up-attention features (``generate_tsv.py`` with
``MIN_BOXES = MAX_BOXES = 36``), which SCAN was trained on and TIGEr's feature arrays hold."""


class TIGErScore(Scorer):
    """TIGEr (Jiang et al., 2019) with the SCAN grounding model; references are required.

    Args:
        model: hub id or local folder of a converted SCAN model (``conversion/convert_scan.py``); the family's
            default model (SCAN trained on COCO, as TIGEr's authors released it) when ``None``.
        revision: hub revision; capeval's pinned revision for the default model when ``None``.
        regions: where region features of image entries come from. Entries that are :class:`RegionFeatures` are
            used as given and never need a detector. For other entries (path, PIL image, array, bytes): ``None``
            loads the family's bottom-up detector (``family_detector(FAMILIES["tigerscore"])``, 36 regions per
            image by ``generate_tsv.py``'s rule with ``MIN_BOXES = MAX_BOXES = 36``) when the first one is met; a
            string is the hub id or folder of a converted detector, run with the same settings; a
            :class:`~capeval.models.regions.extraction.RegionExtractor` is used as it is (with its cache; its
            settings must keep 36 regions, as the default's); any other callable maps a list of PIL images to a
            list of :class:`RegionFeatures`. The result signature records what made the regions when that is known
            (``detector:...``: the detector, its revision and settings, from the detector run here or from the
            ``source`` of precomputed :class:`RegionFeatures`, as ``capeval regions`` files record it).
        device: torch device; Accelerate's ``PartialState().device`` when ``None``.
        batch_size: images per forward pass of the SCAN image encoder, and (regions, caption) pairs per grounding
            batch.
        text_batch_size: captions per forward pass of the GRU text encoder (sorted by length; larger batches use the
            CPU better).
        cache_dir: folder of the on-disk cache of region embeddings, word embeddings and grounding vectors (and of
            the detector's regions, when ``regions`` names a detector).
        chunk_size: items validated and scored at a time.
        progress: show progress bars.
    """

    family = FAMILIES["tigerscore"]
    per_item_only = ("rrs_score", "wds_score")

    def __init__(
        self,
        model: Optional[PathLike] = None,
        revision: Optional[str] = None,
        regions: RegionSource = None,
        device: DeviceLike = None,
        batch_size: int = 64,
        precision: str = "auto",
        cache_dir: Optional[PathLike] = None,
        *,
        text_batch_size: int = 256,
        chunk_size: int = 1024,
        progress: bool = False,
    ) -> None:
        check_scorer_options(batch_size=batch_size, text_batch_size=text_batch_size)
        super().__init__(device, precision, chunk_size=chunk_size)
        if self.precision != "fp32":
            raise InputError(f"TIGEr runs SCAN in fp32 as trained (its grounding maths is float64); got precision "
                             f"{self.precision!r}")
        self.scan = load_scan(model if model is not None else self.family.default_model, revision, self.device)
        if isinstance(regions, RegionExtractor):
            _check_keeps_num_regions(regions.settings)
        self._region_source = regions
        self.cache_dir = cache_dir
        self._extractor: Optional[Union[RegionExtractor, Callable[[List[Any]], List[RegionFeatures]]]] = None
        self.engine = EmbeddingEngine([RegionEmbeddings(self.scan, batch_size), WordEmbeddings(self.scan, text_batch_size),
                                       GroundingVectors(self.scan, batch_size)], cache_dir=cache_dir,
                                      progress=progress)
        self._undefined = functional.UndefinedCounts()
        self._keyed = KeyedRegionsMemo(feature_dim=self.scan.config.img_dim, num_regions=NUM_REGIONS)

    def signature_fields(self) -> Sequence[Tuple[str, object]]:
        import nltk

        scan = self.scan
        fields = [("model", scan.name), ("revision", model_revision(scan)), ("lambda", scan.config.lambda_softmax),
                  ("tau", functional.WDS_TAU), ("nltk", nltk.__version__)]
        sources = self._keyed.sources()
        return fields if sources is None else [*fields, ("detector", sources)]

    def score(self, images: Iterable[Any], candidates: Iterable[str],
              references: Optional[Iterable[Sequence[str]]] = None) -> Dict[str, Any]:
        """Per-item ``tiger_scores``, ``rrs_scores``, ``wds_scores`` and the corpus ``tiger_score`` (their mean).

        Items where the original code raises get the results defined in :mod:`capeval.functional.tigerscore`; a warning
        gives their number."""
        self._undefined = functional.UndefinedCounts()
        self._keyed.reset()
        result = super().score(images, candidates, references)
        counts = self._undefined
        if counts.total():
            warnings.warn(
                f"TIGEr: the original code raises for {counts.total()} item(s), which got defined results: "
                f"{counts.constant_reference_grounding} with constant reference grounding (RRS = 1), "
                f"{counts.constant_candidate_grounding} with constant candidate grounding (regions ranked in order), "
                f"{counts.wds_overflow} with an overflowing WDS sigmoid (WDS = 0)", stacklevel=user_stacklevel())
        return result

    def _chunks(self, images: Iterable[Any], candidates: Iterable[str],
                references: Optional[Iterable[Sequence[str]]]) -> Iterator[ScoringItems]:
        """Chunks whose image entries are validated :class:`RegionFeatures` (36 rows of ``img_dim`` features) or,
        for images, :class:`ImageItem` objects whose regions the detector gives in :meth:`_score_chunk`."""
        return iter_scoring_items(images, candidates, references, self.chunk_size,
                                  validate_image_entry=self.validate_entry)

    def validate_entry(self, entry: Any, index: int) -> Union[KeyedRegions, ImageItem]:
        """Region features validated and hashed once per distinct object (an image's regions are usually passed
        for each of its candidates); other entries validated as images."""
        if not isinstance(entry, RegionFeatures):
            return validate_image(entry, index)
        return self._keyed(entry, index)

    def _regions_of_images(self, items: Sequence[ImageItem]) -> List[KeyedRegions]:
        """Region features of image entries from the region source (the detector is loaded when first needed)."""
        if self._extractor is None:
            self._extractor = self._load_extractor()
        if isinstance(self._extractor, RegionExtractor):
            regions = self._extractor.region_features(items)
        else:
            regions = self._extractor([item.open() for item in items])
            if len(regions) != len(items):
                raise ValueError(f"the region source returned {len(regions)} results for {len(items)} images")
        return [self._keyed(region, item.index) for item, region in zip(items, regions)]

    def _load_extractor(self) -> Union[RegionExtractor, Callable[[List[Any]], List[RegionFeatures]]]:
        source = self._region_source
        if callable(source):
            return source
        from capeval.models.regions.detectors import family_detector  # the detector table only where one loads

        detector = family_detector(self.family)
        return RegionExtractor(detector.load(source, device=self.device, parameter="regions"), detector.settings,
                               cache_dir=self.cache_dir)

    def _score_chunk(self, chunk: ScoringItems) -> Dict[str, np.ndarray]:
        entries = list(chunk.images)
        needing_detector = [position for position, entry in enumerate(entries) if isinstance(entry, ImageItem)]
        if needing_detector:
            detected = self._regions_of_images([entries[position] for position in needing_detector])
            for position, regions in zip(needing_detector, detected):
                entries[position] = regions
        assert chunk.references is not None  # references are required
        embed_size = self.scan.config.embed_size
        distinct_regions = {entry.key: entry for entry in entries}
        region_rows = dict(zip(distinct_regions, self.engine.row_list("scan_regions", list(distinct_regions.values()))))
        texts = list(dict.fromkeys([*chunk.candidates, *(ref for refs in chunk.references for ref in refs)]))
        words = dict(zip(texts, self.engine.row_list("scan_words", texts)))
        pairs: List[GroundingPair] = []
        for entry, candidate, refs in zip(entries, chunk.candidates, chunk.references):
            for text in (candidate, *refs):
                pairs.append(GroundingPair(entry.key, text_key(text), region_rows[entry.key].reshape(-1, embed_size),
                                           words[text].reshape(-1, embed_size)))
        groundings = self.engine.rows("tiger_grounding", pairs)
        r_rows, c_rows, position = [], [], 0
        for refs in chunk.references:
            c_rows.append(groundings[position])
            r_rows.append(functional.mean_reference_grounding(list(groundings[position + 1:position + 1 + len(refs)])))
            position += 1 + len(refs)
        scores = functional.tiger(np.stack(r_rows), np.stack(c_rows))
        self._undefined = self._undefined + scores.undefined
        self._keyed.clear()
        return {"tiger_score": scores.tiger, "rrs_score": scores.rrs, "wds_score": scores.wds}


def _check_keeps_num_regions(settings: ExtractionSettings) -> None:
    """``ValueError`` unless ``settings`` keep exactly :data:`NUM_REGIONS` regions of every image (the bottom-up
    selection with ``min_boxes = max_boxes = 36``, whose RPN fills up its proposals)."""
    if settings.min_proposals != NUM_REGIONS or settings.max_boxes != NUM_REGIONS:
        raise ValueError(f"TIGEr reads {NUM_REGIONS} regions per image, and this RegionExtractor keeps "
                         f"{settings.regions_per_image()} by the {settings.selection!r} selection; use the settings of "
                         f"DETECTORS[{TIGErScore.family.detector!r}] (min_boxes = max_boxes = {NUM_REGIONS})")

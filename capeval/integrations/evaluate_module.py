"""The shared ``evaluate`` adapter behind every ``metrics/<family>`` folder (one per :data:`capeval.registry.FAMILIES`
entry; the folders are ``capeval/integrations/metrics/``, shipped with the package, and
:mod:`capeval.integrations.module_cache` installs them for ``evaluate.load("capeval/<family>")``).

A metric script subclasses :class:`CaptionMetric` and sets the texts and the metric family name; the scorer class
comes from :mod:`capeval.registry`. Scripts must import this module (``from capeval.integrations import
evaluate_module``), not the class: ``evaluate.load`` takes the first ``EvaluationModule`` subclass in the script's
namespace as the metric.

Design (see the metric cards): ``images`` (``videos`` for the families that score videos, see
:attr:`capeval.registry.MetricFamily.entries`) are a keyword of ``compute`` and never an evaluate feature, so evaluate
does not re-encode in-memory images (as PNG, or lossily as JPEG) or EXIF-rotate them on reading, nor copy videos
into Arrow. ``references`` is a declared feature (evaluate drops undeclared ones silently); omitted references travel
as null rows and ``_compute`` turns all-null rows back into "no references". The scorer options are keywords of
``compute`` too: the common ones (:data:`COMMON_OPTIONS`) and the family's own
(:attr:`capeval.registry.MetricFamily.extra_options`).
"""
from __future__ import annotations

import hashlib
import os
from typing import Any, ClassVar, Dict, List, Mapping, Optional, Sequence, Tuple

import datasets
import evaluate

from capeval.inputs import InputError, check_not_single, validate_caption, validate_references
from capeval.registry import FAMILIES, MetricFamily
from capeval.scorers.base import Scorer

ScorerKey = Tuple[Tuple[str, str], ...]
"""The options a scorer was made with, as (name, :func:`option_key`) pairs sorted by name."""

ENTRY_KEYWORDS = ("images", "videos")
"""The ``compute`` keywords of what the captions describe."""

COMMON_OPTIONS = ("model", "revision", "device", "batch_size", "precision", "cache_dir")
"""The scorer options every family takes as ``compute`` keywords."""


def option_key(value: Any) -> str:
    """A scorer option as it enters the key of the kept scorers: its text, or for a sequence of values (EMScore's
    ``idf_corpus``) a digest of them, so that a corpus of many sentences makes a short key."""
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes, os.PathLike)):
        return f"sequence-{len(value)}-{hashlib.blake2b(repr(list(value)).encode(), digest_size=16).hexdigest()}"
    return str(value)


def check_compute_keywords(family: MetricFamily, keywords: Mapping[str, Any]) -> None:
    """The ``compute`` keywords other than predictions and references: the family's entries (one kind, a list) and
    its scorer options; an :class:`InputError` says what is wrong."""
    known = (*ENTRY_KEYWORDS, *COMMON_OPTIONS, *family.extra_options)
    unknown = [name for name in keywords if name not in known]
    if unknown:
        raise InputError(f"{family.label} takes no keyword {unknown[0]!r}; it takes "
                         f"{', '.join(family.entries + COMMON_OPTIONS + family.extra_options)}")
    given = [name for name in ENTRY_KEYWORDS if keywords.get(name) is not None]
    for name in given:
        if name not in family.entries:
            raise InputError(f"{family.label} scores {' or '.join(family.entries)}, not {name}: pass "
                             f"compute({family.entries[0]}=[...])")
        check_not_single(name, keywords[name], f"a list of {name} (one per prediction)")
    if len(given) > 1:
        raise InputError(f"give {' or '.join(given)}, not both")
    if not given and family.inputs == "images":  # a video family may score references alone (checked in _compute)
        raise InputError(f"{' or '.join(family.entries)} are required: pass "
                         f"{' or '.join(f'compute({name}=[...])' for name in family.entries)} with one per prediction")


def reference_rows(predictions: Optional[Sequence[Any]], references: Optional[Sequence[Any]]) -> Optional[list]:
    """Check predictions and references; one reference row per prediction, ``None`` rows when omitted."""
    for name, values, expected in (("predictions", predictions, "a list of strings"),
                                   ("references", references, "a list of lists of strings")):
        if values is not None:
            check_not_single(name, values, expected)
    if predictions is None:
        return None if references is None else list(references)
    for index, prediction in enumerate(predictions):
        validate_caption(prediction, f"predictions[{index}]")
    if references is None:
        return [None] * len(predictions)
    for index, refs in enumerate(references):
        if refs is not None:
            validate_references(refs, index)
    return list(references)


class CaptionMetric(evaluate.Metric):
    """An image- or video-caption metric computed by a capeval scorer, kept per (model, revision, device, ...)
    setting."""

    family: ClassVar[str]
    """Name of the metric family in :data:`capeval.registry.FAMILIES`."""
    description_text: ClassVar[str]
    citation_text: ClassVar[str]
    inputs_text: ClassVar[str]
    urls: ClassVar[Tuple[str, str]]
    """(code repository, paper) links."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._scorers: Dict[ScorerKey, Scorer] = {}

    def _info(self) -> evaluate.MetricInfo:
        code, paper = self.urls
        return evaluate.MetricInfo(
            description=self.description_text,
            citation=self.citation_text,
            inputs_description=self.inputs_text,
            features=datasets.Features(
                {"predictions": datasets.Value("string"), "references": datasets.Sequence(datasets.Value("string"))}
            ),
            homepage=code,
            codebase_urls=[code],
            reference_urls=[paper],
        )

    def compute(self, *, predictions: Any = None, references: Any = None, **kwargs: Any) -> Optional[Dict[str, Any]]:
        """Score the given and the added predictions; ``images`` (or ``videos``) and the scorer options are keywords."""
        check_compute_keywords(FAMILIES[self.family], kwargs)
        return super().compute(predictions=predictions, references=references, **kwargs)

    def add_batch(self, *, predictions: Any = None, references: Any = None, **kwargs: Any) -> None:
        """Add predictions (and optionally references); images or videos are given to ``compute``, which adds through
        here too."""
        for name in ENTRY_KEYWORDS:
            if name in kwargs:
                raise InputError(f"{name} are a keyword of compute({name}=...), not of add/add_batch (see the metric "
                                 "card)")
        super().add_batch(predictions=predictions, references=reference_rows(predictions, references), **kwargs)

    def _compute(
        self,
        predictions: List[str],
        references: List[Optional[List[str]]],
        images: Optional[Sequence[Any]] = None,
        videos: Optional[Sequence[Any]] = None,
        **options: Any,
    ) -> Dict[str, Any]:
        missing = [index for index, refs in enumerate(references) if refs is None]
        if missing and len(missing) < len(references):
            raise InputError(
                f"references[{missing[0]}] is missing while other predictions have references; "
                "give references for every prediction or for none"
            )
        family = FAMILIES[self.family]
        if images is None and videos is None and missing:  # a video family, which scores references alone
            raise InputError(f"{family.label} needs {family.inputs}, references or both: pass "
                             f"compute({family.inputs}=[...]), compute(references=[...]) or both")
        options = {name: value for name, value in options.items() if value is not None}
        key = tuple(sorted((name, option_key(value)) for name, value in options.items()))
        if key not in self._scorers:
            self._scorers[key] = family.scorer_class()(**options)
        entries = {"videos": videos} if videos is not None or family.inputs == "videos" else {"images": images}
        return self._scorers[key].score(**entries, candidates=predictions, references=None if missing else references)

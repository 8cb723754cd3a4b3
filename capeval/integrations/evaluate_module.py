"""The shared ``evaluate`` adapter behind every ``metrics/<family>`` folder (one per :data:`capeval.registry.FAMILIES`
entry).

A metric script subclasses :class:`CaptionMetric` and sets the texts and the metric family name; the scorer class
comes from :mod:`capeval.registry`. Scripts must import this module (``from capeval.integrations import
evaluate_module``), not the class: ``evaluate.load`` takes the first ``EvaluationModule`` subclass in the script's
namespace as the metric.

Design (see the metric cards): ``images`` are a keyword of ``compute`` and never an evaluate feature, so evaluate
does not re-encode in-memory images (as PNG, or lossily as JPEG) or EXIF-rotate them on reading. ``references`` is
a declared feature (evaluate drops undeclared ones silently); omitted references travel as null rows and
``_compute`` turns all-null rows back into "no references".
"""
from __future__ import annotations

from typing import Any, ClassVar, Dict, List, Optional, Sequence, Tuple

import datasets
import evaluate

from capeval.inputs import ImageInput, InputError, check_not_single, validate_caption, validate_references
from capeval.registry import scorer_class
from capeval.scorers.base import Scorer

ScorerKey = Tuple[Optional[str], ...]


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
    """An image-caption metric computed by a capeval scorer, kept per (model, revision, device, ...) setting."""

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
        """Score the given and the added predictions; ``images`` and the scorer options are keywords."""
        if kwargs.get("images") is None:
            raise InputError("images are required: pass compute(images=[...]) with one image per prediction")
        check_not_single("images", kwargs["images"], "a list of images (one per prediction)")
        return super().compute(predictions=predictions, references=references, **kwargs)

    def add_batch(self, *, predictions: Any = None, references: Any = None, **kwargs: Any) -> None:
        """Add predictions (and optionally references); images are given to ``compute``, which adds through here too."""
        if "images" in kwargs:
            raise InputError("images are a keyword of compute(images=...), not of add/add_batch (see the metric card)")
        super().add_batch(predictions=predictions, references=reference_rows(predictions, references), **kwargs)

    def _compute(
        self,
        predictions: List[str],
        references: List[Optional[List[str]]],
        images: Sequence[ImageInput],
        model: Optional[str] = None,
        revision: Optional[str] = None,
        device: Optional[str] = None,
        batch_size: Optional[int] = None,
        precision: Optional[str] = None,
        cache_dir: Optional[str] = None,
    ) -> Dict[str, Any]:
        missing = [index for index, refs in enumerate(references) if refs is None]
        if missing and len(missing) < len(references):
            raise InputError(
                f"references[{missing[0]}] is missing while other predictions have references; "
                "give references for every prediction or for none"
            )
        options = {"model": model, "revision": revision, "device": device, "batch_size": batch_size,
                   "precision": precision, "cache_dir": cache_dir}
        key = tuple(None if value is None else str(value) for value in options.values())
        if key not in self._scorers:
            options = {name: value for name, value in options.items() if value is not None}
            self._scorers[key] = scorer_class(self.family)(**options)
        return self._scorers[key].score(images, predictions, None if missing else references)

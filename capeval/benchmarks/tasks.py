"""The protocol of each benchmark task: what a metric is called with, and how its scores become statistics.

``correlation`` (rated items): the correlations of the scores with the human scores. ``pairwise`` (PASCAL-50S): the
accuracy of scoring the caption humans preferred above the other one, per category and the mean of the categories.
``foil``: the accuracy of scoring the correct caption above its foil. Each task names the images its bootstrap
resamples (one per item, or per pair for FOIL) and computes its statistics on every resample.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, ClassVar, Dict, List, Optional, Sequence, Tuple, Type

import numpy as np

from capeval.benchmarks.datasets import Benchmark, FoilItem, PairwiseItem, RatedItem
from capeval.benchmarks.statistics import (CORRELATION_STATISTICS, ImageBootstrap, accuracy_names, accuracy_replicates,
                                           category_accuracies, correlation_replicates, correlations, preference_credit)

MetricInputs = Tuple[List[str], List[str], List[List[str]]]
"""``(images, candidates, references)``: the lists a metric is called with."""

Evaluation = Tuple[np.ndarray, Dict[str, float], Dict[str, np.ndarray]]
"""The scores a result keeps, each statistic's value, and each statistic on every bootstrap resample."""


class Task:
    """A task's protocol over the items of one benchmark.

    ``groups`` names the image of each unit the bootstrap resamples; ``statistic_names`` lists the statistics
    :meth:`evaluate` computes. ``ties`` is the credit of a tie between two captions' scores, ``progress`` shows a bar
    over the resamples where computing them takes a while."""

    item_type: ClassVar[type]
    groups: List[str]
    statistic_names: Tuple[str, ...]

    def __init__(self, items: Sequence[Any], ties: str, progress: bool) -> None:
        self.items = items
        self.ties = ties
        self.progress = progress

    def inputs(self, image_dir: Optional[Path]) -> MetricInputs:
        """One input per item: its image (a path under ``image_dir``, or its name without one), its candidate and
        its references."""
        return (
            [_image_path(item, image_dir) for item in self.items],
            [item.candidate for item in self.items],
            [list(item.references) for item in self.items],
        )

    def keys(self) -> List[str]:
        """The name of each input, for error messages."""
        return [item.key for item in self.items]

    def evaluate(self, name: str, scores: np.ndarray, bootstrap: ImageBootstrap) -> Evaluation:
        """The statistics of metric ``name``'s ``scores`` (one per input) and their bootstrap replicates."""
        raise NotImplementedError


def _image_path(item: Any, image_dir: Optional[Path]) -> str:
    return str(image_dir / item.image) if image_dir is not None else item.image


class CorrelationTask(Task):
    """Rated items: Kendall tau-b / tau-c, Pearson and Spearman correlations of the scores with the human scores."""

    item_type = RatedItem

    def __init__(self, items: Sequence[RatedItem], ties: str, progress: bool) -> None:
        super().__init__(items, ties, progress)
        self.human = np.asarray([item.human for item in items], dtype=np.float64)
        self.groups = [item.image for item in items]
        self.statistic_names = CORRELATION_STATISTICS

    def evaluate(self, name: str, scores: np.ndarray, bootstrap: ImageBootstrap) -> Evaluation:
        values = correlations(scores, self.human)
        replicates = correlation_replicates(scores, self.human, bootstrap, progress=self.progress,
                                            description=f"bootstrap {name}")
        return scores, values, replicates


class _AccuracyTask(Task):
    """The accuracy of scoring the preferred caption of each pair above the other one, per category."""

    categories: Optional[List[str]]

    def compared(self, scores: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The scores a result keeps, and the scores of each pair's preferred and other caption."""
        raise NotImplementedError

    def evaluate(self, name: str, scores: np.ndarray, bootstrap: ImageBootstrap) -> Evaluation:
        scores, preferred, other = self.compared(scores)
        credit = preference_credit(preferred, other, self.ties)
        values = category_accuracies(credit, self.categories)
        return scores, values, accuracy_replicates(credit, self.categories, bootstrap)


class PairwiseAccuracyTask(_AccuracyTask):
    """PASCAL-50S: a metric scores every first candidate, then every second one; the scores a result keeps are
    ``(n_items, 2)``, one column per candidate."""

    item_type = PairwiseItem

    def __init__(self, items: Sequence[PairwiseItem], ties: str, progress: bool) -> None:
        super().__init__(items, ties, progress)
        self.labels = np.asarray([item.label for item in items])
        self.groups = [item.image for item in items]
        self.categories = [item.category for item in items]
        self.statistic_names = accuracy_names(self.categories)

    def inputs(self, image_dir: Optional[Path]) -> MetricInputs:
        images = [_image_path(item, image_dir) for item in self.items] * 2
        candidates = [item.candidates[0] for item in self.items] + [item.candidates[1] for item in self.items]
        references = [list(item.references) for item in self.items] * 2
        return images, candidates, references

    def keys(self) -> List[str]:
        keys = super().keys()
        return [f"{key} (candidate 0)" for key in keys] + [f"{key} (candidate 1)" for key in keys]

    def compared(self, scores: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        scores = scores.reshape(2, len(self.items)).T
        rows = np.arange(len(self.items))
        return scores, scores[rows, self.labels], scores[rows, 1 - self.labels]


class FoilAccuracyTask(_AccuracyTask):
    """FOIL: each pair is the correct caption (preferred) and its foil; the bootstrap resamples the pairs' images."""

    item_type = FoilItem

    def __init__(self, items: Sequence[FoilItem], ties: str, progress: bool) -> None:
        super().__init__(items, ties, progress)
        self.pairs = _foil_pairs(items)
        self.groups = [items[correct].image for correct, _ in self.pairs]
        self.categories = None
        self.statistic_names = accuracy_names(self.categories)

    def compared(self, scores: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        return scores, scores[self.pairs[:, 0]], scores[self.pairs[:, 1]]


def _foil_pairs(items: Sequence[FoilItem]) -> np.ndarray:
    """``(n_pairs, 2)`` item indices (correct caption, foil caption), pairs in first-seen order."""
    members: Dict[str, List[int]] = defaultdict(list)
    for index, item in enumerate(items):
        members[item.pair].append(index)
    pairs = []
    for pair, indices in members.items():
        kinds = sorted(items[index].is_foil for index in indices)
        if kinds != [False, True]:
            keys = ", ".join(items[index].key for index in indices)
            raise ValueError(f"FOIL pair {pair!r} must hold one correct and one foil caption; it holds items {keys}")
        pairs.append(sorted(indices, key=lambda index: items[index].is_foil))
    return np.asarray(pairs, dtype=np.int64)


TASK_TYPES: Dict[str, Type[Task]] = {
    "correlation": CorrelationTask,
    "pairwise": PairwiseAccuracyTask,
    "foil": FoilAccuracyTask,
}


def task_type(benchmark: Benchmark) -> Type[Task]:
    """The task type of ``benchmark``, once every item is checked to be of its item type."""
    if benchmark.task not in TASK_TYPES:
        raise ValueError(f"benchmark {benchmark.name!r} has unknown task {benchmark.task!r}")
    if not benchmark.items:
        raise ValueError(f"benchmark {benchmark.name!r} has no items")
    expected = TASK_TYPES[benchmark.task].item_type
    for index, item in enumerate(benchmark.items):
        if not isinstance(item, expected):
            raise ValueError(
                f"item {index} of {benchmark.name!r} is a {type(item).__name__}, expected {expected.__name__}"
            )
    return TASK_TYPES[benchmark.task]

"""The protocol of each benchmark task: what a metric is called with, and how its scores become statistics.

``correlation`` (rated items): the correlations of the scores with the human scores. ``pairwise`` (PASCAL-50S): the
accuracy of scoring the caption humans preferred above the other one, per category and the mean of the categories.
``foil``: the accuracy of scoring the correct caption above its foil. ``video_correlation`` (VATEX-EVAL): each
candidate against its video's feature file, the correlations with every rater averaged as EMScore's demo averages
them. ``video_foil`` (ActivityNet-FOIL): each sentence of a paragraph against its segment of the video, a paragraph's
score the mean of its sentences', the accuracy of scoring the correct paragraph above its foil. Each task names the
images (or videos) its bootstrap resamples (one per item, or per pair for FOIL) and computes its statistics on every
resample.
"""
from __future__ import annotations

import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, ClassVar, Dict, List, Optional, Sequence, Tuple, Type

import numpy as np

from capeval.benchmarks.datasets import Benchmark, FoilItem, PairwiseItem, ParagraphItem, RatedItem, RatedVideoItem
from capeval.benchmarks.datasets.activitynet_foil import segment_frames
from capeval.benchmarks.datasets.base import feature_file
from capeval.benchmarks.statistics import (CORRELATION_STATISTICS, RATER_MEAN_STATISTICS, ImageBootstrap,
                                           accuracy_names, accuracy_replicates, category_accuracies,
                                           correlation_replicates, correlations, preference_credit,
                                           rater_mean_correlations, rater_mean_replicates)
from capeval.video import VideoFeatures, load_video_features

MetricInputs = Tuple[List[Any], List[str], List[List[str]]]
"""``(images, candidates, references)``: the lists a metric is called with (for video tasks, videos: feature file
paths or :class:`capeval.video.VideoFeatures`)."""

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
        """One input per item: its image (:meth:`visual_input`), its candidate and its references."""
        return (
            [self.visual_input(item, image_dir) for item in self.items],
            [item.candidate for item in self.items],
            [list(item.references) for item in self.items],
        )

    def visual_input(self, item: Any, image_dir: Optional[Path]) -> str:
        """What a metric gets for the image of ``item``: its path under ``image_dir``, or its name without one."""
        return str(image_dir / item.image) if image_dir is not None else item.image

    def group_of(self, item: Any) -> str:
        """The unit of ``item`` the bootstrap resamples: its image."""
        return item.image

    def keys(self) -> List[str]:
        """The name of each input, for error messages."""
        return [item.key for item in self.items]

    def evaluate(self, name: str, scores: np.ndarray, bootstrap: ImageBootstrap) -> Evaluation:
        """The statistics of metric ``name``'s ``scores`` (one per input) and their bootstrap replicates."""
        raise NotImplementedError


class CorrelationTask(Task):
    """Rated items: Kendall tau-b / tau-c, Pearson and Spearman correlations of the scores with the human scores
    (``statistics_of`` computes them, ``replicates_of`` on every bootstrap resample)."""

    item_type = RatedItem
    statistic_names = CORRELATION_STATISTICS
    statistics_of = staticmethod(correlations)
    replicates_of = staticmethod(correlation_replicates)

    def __init__(self, items: Sequence[Any], ties: str, progress: bool) -> None:
        super().__init__(items, ties, progress)
        self.human = np.asarray([item.human for item in items], dtype=np.float64)
        self.groups = [self.group_of(item) for item in items]

    def evaluate(self, name: str, scores: np.ndarray, bootstrap: ImageBootstrap) -> Evaluation:
        values = self.statistics_of(scores, self.human)
        replicates = self.replicates_of(scores, self.human, bootstrap, progress=self.progress,
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
        images = [self.visual_input(item, image_dir) for item in self.items] * 2
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


def _foil_pairs(items: Sequence[Any], pair_of: Callable[[Any], str] = lambda item: item.pair) -> np.ndarray:
    """``(n_pairs, 2)`` item indices (correct caption, foil caption), pairs (named by ``pair_of``) in first-seen
    order."""
    members: Dict[str, List[int]] = defaultdict(list)
    for index, item in enumerate(items):
        members[pair_of(item)].append(index)
    pairs = []
    for pair, indices in members.items():
        kinds = sorted(items[index].is_foil for index in indices)
        if kinds != [False, True]:
            keys = ", ".join(items[index].key for index in indices)
            raise ValueError(f"FOIL pair {pair!r} must hold one correct and one foil caption; it holds items {keys}")
        pairs.append(sorted(indices, key=lambda index: items[index].is_foil))
    return np.asarray(pairs, dtype=np.int64)


class VideoCorrelationTask(CorrelationTask):
    """VATEX-EVAL: each candidate against its video's feature file; Kendall tau-b and Spearman with each rater's
    scores, averaged over the raters (:func:`statistics.rater_mean_correlations`); the bootstrap resamples the
    videos."""

    item_type = RatedVideoItem
    statistic_names = RATER_MEAN_STATISTICS
    statistics_of = staticmethod(rater_mean_correlations)
    replicates_of = staticmethod(rater_mean_replicates)

    def visual_input(self, item: RatedVideoItem, image_dir: Optional[Path]) -> str:
        """The video's feature file under ``image_dir``, the benchmark's features folder."""
        assert image_dir is not None, "a video task reads the features folder"
        return str(feature_file(image_dir, item.video))

    def group_of(self, item: RatedVideoItem) -> str:
        return item.video


class VideoFoilTask(Task):
    """ActivityNet-FOIL: one input per sentence of every paragraph, the sentence against its segment's frame features
    (:func:`segment_frames`) and its references; a paragraph's score is the mean of its sentences' scores, and a
    video counts when its correct paragraph scores above its foil (``ties``: the credit of equal scores). A sentence
    whose segment holds no frame is left out of the inputs: its paragraph gets no score (NaN, as the demo's
    ``torch.mean`` over a NaN gives) and its video counts as a failure.

    :meth:`inputs` reads the feature files and must run before :meth:`keys` and :meth:`evaluate`."""

    item_type = ParagraphItem

    def __init__(self, items: Sequence[ParagraphItem], ties: str, progress: bool) -> None:
        super().__init__(items, ties, progress)
        self.pairs = _foil_pairs(items, lambda item: item.video)
        self.groups = [items[correct].video for correct, _ in self.pairs]
        self.statistic_names = accuracy_names(None)
        self.spans: Dict[int, Tuple[int, int]] = {}
        """The inputs ``[start, end)`` of each paragraph that has a score."""
        self.sentence_keys: List[str] = []

    def inputs(self, image_dir: Optional[Path]) -> MetricInputs:
        assert image_dir is not None, "a video task reads the features folder"
        videos: List[VideoFeatures] = []
        candidates: List[str] = []
        references: List[List[str]] = []
        self.spans, self.sentence_keys = {}, []
        empty_segments = 0
        for pair in self.pairs:
            path = feature_file(image_dir, self.items[pair[0]].video)
            features = load_video_features(path).features
            for index in pair:
                item = self.items[index]
                start = len(videos)
                for sentence, (text, timestamp, refs) in enumerate(zip(item.sentences, item.timestamps,
                                                                       item.references)):
                    rows = segment_frames(timestamp, len(features), item.duration)
                    if not rows:
                        empty_segments += 1
                        continue
                    source = f"{path} rows {rows.start}:{rows.stop}"
                    videos.append(VideoFeatures(features[rows.start:rows.stop], source))
                    candidates.append(text)
                    references.append(list(refs))
                    self.sentence_keys.append(f"{item.key}#{sentence}")
                if item.sentences and len(videos) - start == len(item.sentences):
                    self.spans[int(index)] = (start, len(videos))
                else:  # the paragraph gets no score: its other sentences need none
                    del videos[start:], candidates[start:], references[start:], self.sentence_keys[start:]
        if empty_segments:
            warnings.warn(f"{empty_segments} segment(s) hold no frame of their video's features; "
                          f"{len(self.items) - len(self.spans)} paragraph(s) get no score and their videos count as "
                          "failures (the demo's scores are NaN there)", stacklevel=3)
        return videos, candidates, references

    def keys(self) -> List[str]:
        return self.sentence_keys

    def evaluate(self, name: str, scores: np.ndarray, bootstrap: ImageBootstrap) -> Evaluation:
        paragraphs = np.full(len(self.items), np.nan)
        for index, (start, end) in self.spans.items():
            paragraphs[index] = np.mean(scores[start:end])
        correct, foiled = paragraphs[self.pairs[:, 0]], paragraphs[self.pairs[:, 1]]
        scored = np.isfinite(correct) & np.isfinite(foiled)
        credit = np.zeros(len(self.pairs))
        credit[scored] = preference_credit(correct[scored], foiled[scored], self.ties)
        return paragraphs, category_accuracies(credit), accuracy_replicates(credit, None, bootstrap)


TASK_TYPES: Dict[str, Type[Task]] = {
    "correlation": CorrelationTask,
    "pairwise": PairwiseAccuracyTask,
    "foil": FoilAccuracyTask,
    "video_correlation": VideoCorrelationTask,
    "video_foil": VideoFoilTask,
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

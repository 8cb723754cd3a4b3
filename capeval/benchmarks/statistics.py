"""Agreement statistics between metric scores and human judgments, with image-level bootstrap intervals.

Correlations (Kendall tau_b / tau_c, Spearman, Pearson) follow ``scipy.stats``; values are fractions in [-1, 1]
(reports multiply by 100). Accuracies are fractions in [0, 1]. Several raters per item (VATEX-EVAL): the correlations
with each rater, averaged, exactly as EMScore's ``compute_correlation_uniquehuman`` computes them
(:func:`rater_mean_correlations`).

Confidence intervals resample IMAGES with replacement: every item of a drawn image comes along, because the
ratings of one image (several candidates, several raters) are not independent. An interval is the percentile
interval of the statistic over the resamples. Two metrics are compared on the SAME resamples (paired bootstrap),
see :func:`paired_comparison`.

Cost: the four correlations of one resample of Flickr8k-Expert (16,992 items) take about 7 ms on one core (scipy's
O(n log n) Kendall and two rankings dominate), so 1,000 resamples take about 7 s per metric; accuracies are
computed for all resamples at once from per-image totals.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable, Dict, Hashable, Mapping, Optional, Sequence, Tuple

import numpy as np

CORRELATION_STATISTICS: tuple[str, ...] = ("kendall_tau_b", "kendall_tau_c", "spearman", "pearson")
"""Statistics of a correlation benchmark, in report order."""

RATER_MEAN_STATISTICS: tuple[str, ...] = ("kendall_tau_b", "spearman")
"""Statistics of a benchmark with several raters per item (VATEX-EVAL), each the mean over the raters."""

ROUNDING = 4
"""Decimals ``compute_correlation_uniquehuman`` rounds the scores and the averaged correlations to."""

P_VALUE_BOUND = 0.01
"""``compute_correlation_uniquehuman`` asserts that every p-value is below this."""

TIE_CREDITS: Mapping[str, float] = {"half": 0.5, "wrong": 0.0}
"""Credit for a pair the metric scores equally: ``"half"`` (default, the expected accuracy of a coin flip) or ``"wrong"``."""


def _as_vector(values: Sequence[float], name: str) -> np.ndarray:
    vector = np.asarray(values, dtype=np.float64)
    if vector.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {vector.shape}")
    bad = np.flatnonzero(~np.isfinite(vector))
    if bad.size:
        raise ValueError(f"{name}[{bad[0]}] is {vector[bad[0]]}: scores must be finite")
    return vector


def _check_pair(metric: Sequence[float], human: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    metric_vector = _as_vector(metric, "metric scores")
    human_vector = _as_vector(human, "human scores")
    if metric_vector.shape != human_vector.shape:
        raise ValueError(f"{metric_vector.size} metric scores but {human_vector.size} human scores")
    if metric_vector.size < 2:
        raise ValueError("a correlation needs at least two items")
    for name, vector in (("metric", metric_vector), ("human", human_vector)):
        if vector.min() == vector.max():
            raise ValueError(f"all {name} scores are equal ({vector[0]}): the correlation is undefined")
    return metric_vector, human_vector


def _tie_pairs(values: np.ndarray) -> tuple[float, int]:
    """Number of pairs tied on ``values`` and number of distinct values."""
    _, counts = np.unique(values, return_counts=True)
    counts = counts.astype(np.float64)
    return float(np.sum(counts * (counts - 1.0)) / 2.0), counts.size


def _kendall_b_and_c(metric: np.ndarray, human: np.ndarray) -> tuple[float, float]:
    """Kendall tau_b from scipy and tau_c from the same concordance count.

    scipy counts distinct values for tau_c with a Python ``set`` (slow on 17k floats), so tau_c is derived:
    ``C - D = tau_b * sqrt((n0 - n1)(n0 - n2))`` and ``tau_c = 2 (C - D) / (n^2 (m - 1) / m)`` with ``m`` the
    smaller number of distinct values, exactly scipy's ``variant="c"`` formula.
    """
    from scipy import stats as scipy_stats  # imported on use: it slows down the command line's start

    tau_b = float(scipy_stats.kendalltau(metric, human, variant="b").statistic)
    size = metric.size
    total_pairs = size * (size - 1) / 2.0
    metric_ties, metric_classes = _tie_pairs(metric)
    human_ties, human_classes = _tie_pairs(human)
    concordant_minus_discordant = tau_b * np.sqrt(total_pairs - metric_ties) * np.sqrt(total_pairs - human_ties)
    classes = min(metric_classes, human_classes)
    tau_c = 2.0 * concordant_minus_discordant / (size**2 * (classes - 1) / classes)
    return tau_b, float(tau_c)


def correlations(metric: Sequence[float], human: Sequence[float]) -> dict[str, float]:
    """Kendall tau_b, tau_c, Spearman and Pearson correlation of metric scores with human scores.

    Equal to ``scipy.stats.kendalltau(metric, human, variant=...)``, ``spearmanr`` (Pearson's r of average ranks)
    and ``pearsonr``.
    """
    metric_vector, human_vector = _check_pair(metric, human)
    return _correlations(metric_vector, human_vector)


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's r (``scipy.stats.pearsonr``'s statistic without its per-call overhead; elementwise sums rather
    than BLAS dot products, which spin-wait on a busy multi-core machine)."""
    x_centred, y_centred = x - x.mean(), y - y.mean()
    return float(np.sum(x_centred * y_centred) / np.sqrt(np.sum(x_centred**2) * np.sum(y_centred**2)))


def _correlations(metric: np.ndarray, human: np.ndarray) -> dict[str, float]:
    from scipy import stats as scipy_stats

    tau_b, tau_c = _kendall_b_and_c(metric, human)
    return {
        "kendall_tau_b": tau_b,
        "kendall_tau_c": tau_c,
        "spearman": _pearson(scipy_stats.rankdata(metric), scipy_stats.rankdata(human)),
        "pearson": _pearson(metric, human),
    }


def preference_credit(preferred: Sequence[float], other: Sequence[float], ties: str = "half") -> np.ndarray:
    """Per-pair credit: 1 where the metric scores the human-preferred caption higher, 0 where lower, and
    ``TIE_CREDITS[ties]`` where it scores both equally."""
    if ties not in TIE_CREDITS:
        raise ValueError(f"ties must be one of {sorted(TIE_CREDITS)}, got {ties!r}")
    preferred_vector = _as_vector(preferred, "preferred-caption scores")
    other_vector = _as_vector(other, "other-caption scores")
    if preferred_vector.shape != other_vector.shape:
        raise ValueError(f"{preferred_vector.size} preferred-caption scores but {other_vector.size} other scores")
    credit = (preferred_vector > other_vector).astype(np.float64)
    credit[preferred_vector == other_vector] = TIE_CREDITS[ties]
    return credit


def accuracy_names(categories: Optional[Sequence[str]] = None) -> tuple[str, ...]:
    """``"accuracy"`` (the unweighted mean over categories), then ``"accuracy_<category>"`` per category by name."""
    if categories is None:
        return ("accuracy",)
    return ("accuracy",) + tuple(f"accuracy_{category}" for category in sorted(set(categories)))


def _category_membership(n_pairs: int, categories: Optional[Sequence[str]]) -> np.ndarray:
    """``(n_pairs, n_categories)`` 0/1 membership, categories sorted by name (one column without categories)."""
    if categories is None:
        return np.ones((n_pairs, 1))
    category_array = np.asarray(categories)
    if category_array.shape != (n_pairs,):
        raise ValueError(f"{category_array.size} categories for {n_pairs} pairs")
    return np.stack([category_array == name for name in sorted(set(categories))], axis=1).astype(np.float64)


def _named_accuracies(per_category: np.ndarray, categories: Optional[Sequence[str]]) -> dict[str, np.ndarray]:
    """Columns of ``per_category`` under :func:`accuracy_names`, the mean over categories first."""
    names = accuracy_names(categories)
    if categories is None:
        return {names[0]: per_category[..., 0]}
    columns = {name: per_category[..., column] for column, name in enumerate(names[1:])}
    return {names[0]: per_category.mean(axis=-1), **columns}


def category_accuracies(credit: Sequence[float], categories: Optional[Sequence[str]] = None) -> dict[str, float]:
    """Mean credit per category and the unweighted mean over categories (names from :func:`accuracy_names`)."""
    credit_vector = np.asarray(credit, dtype=np.float64)
    membership = _category_membership(credit_vector.size, categories)
    per_category = (credit_vector @ membership) / membership.sum(axis=0)
    return {name: float(value) for name, value in _named_accuracies(per_category, categories).items()}


class ImageBootstrap:
    """Resamples of the images with replacement, each image bringing all of its items.

    Resample ``b`` draws as many images as there are, uniformly with replacement (``numpy.random.default_rng(seed)``);
    an image drawn k times contributes its items k times.
    """

    def __init__(self, images: Sequence[Hashable], n_resamples: int = 1000, seed: int = 0) -> None:
        if n_resamples < 1:
            raise ValueError(f"n_resamples must be at least 1, got {n_resamples}")
        image_ids, self._item_image = np.unique(np.asarray(images, dtype=object).astype(str), return_inverse=True)
        self.n_images = image_ids.size
        self.n_items = self._item_image.size
        self.n_resamples = n_resamples
        self.seed = seed
        self._item_order = np.argsort(self._item_image, kind="stable")
        self._image_sizes = np.bincount(self._item_image, minlength=self.n_images)
        self._image_starts = np.concatenate(([0], np.cumsum(self._image_sizes)[:-1]))
        self.drawn_images = np.random.default_rng(seed).integers(0, self.n_images, size=(n_resamples, self.n_images))
        """``(n_resamples, n_images)`` indices of the images drawn in each resample."""

    def item_indices(self, resample: int) -> np.ndarray:
        """Indices of the items of resample ``resample`` (with repeats)."""
        drawn = self.drawn_images[resample]
        sizes = self._image_sizes[drawn]
        ends = np.cumsum(sizes)
        offsets = np.repeat(self._image_starts[drawn] - (ends - sizes), sizes)
        return self._item_order[offsets + np.arange(ends[-1])]

    def image_counts(self) -> np.ndarray:
        """``(n_resamples, n_images)`` number of times each image is drawn in each resample."""
        rows = np.repeat(np.arange(self.n_resamples), self.n_images)
        flat = np.bincount(rows * self.n_images + self.drawn_images.ravel(), minlength=self.n_resamples * self.n_images)
        return flat.reshape(self.n_resamples, self.n_images)

    def image_totals(self, values: np.ndarray) -> np.ndarray:
        """Per-image sums of per-item ``values`` (items on axis 0), shape ``(n_images, ...)``."""
        totals = np.zeros((self.n_images,) + values.shape[1:], dtype=np.float64)
        np.add.at(totals, self._item_image, values)
        return totals


def _replicates(
    statistics: Callable[[np.ndarray, np.ndarray], Dict[str, float]],
    names: Sequence[str],
    metric: np.ndarray,
    human: np.ndarray,
    bootstrap: ImageBootstrap,
    progress: bool,
    description: str,
) -> dict[str, np.ndarray]:
    """``statistics(metric, human)`` on every bootstrap resample of the items (rows of ``human``, one column per
    rater or a vector); NaN where a resample is constant in the metric or in a rater's scores."""
    from tqdm.auto import tqdm  # on use: ``capeval --help`` imports this module

    if metric.size != bootstrap.n_items:
        raise ValueError(f"{metric.size} scores but the bootstrap was built for {bootstrap.n_items} items")
    replicates = {name: np.full(bootstrap.n_resamples, np.nan) for name in names}
    for resample in tqdm(range(bootstrap.n_resamples), desc=description, unit="resample", leave=False,
                         disable=not progress):
        indices = bootstrap.item_indices(resample)
        metric_sample, human_sample = metric[indices], human[indices]
        if metric_sample.min() == metric_sample.max() or np.any(human_sample.min(axis=0) == human_sample.max(axis=0)):
            continue
        for name, value in statistics(metric_sample, human_sample).items():
            replicates[name][resample] = value
    return replicates


def correlation_replicates(
    metric: Sequence[float],
    human: Sequence[float],
    bootstrap: ImageBootstrap,
    *,
    progress: bool = False,
    description: str = "bootstrap",
) -> dict[str, np.ndarray]:
    """Each correlation statistic on every bootstrap resample; NaN where a resample is constant in one variable.

    ``progress`` shows a bar over the resamples, labelled ``description``."""
    metric_vector, human_vector = _check_pair(metric, human)
    return _replicates(_correlations, CORRELATION_STATISTICS, metric_vector, human_vector, bootstrap, progress,
                       description)


def _check_raters(metric: Sequence[float], human: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The metric's scores rounded as ``compute_correlation_uniquehuman`` rounds them, and ``human`` as an
    ``(items, raters)`` float array, both checked."""
    metric_vector = _as_vector(metric, "metric scores")
    human_matrix = np.asarray(human, dtype=np.float64)
    if human_matrix.ndim != 2 or human_matrix.shape[0] != metric_vector.size:
        raise ValueError(f"human scores must be (items, raters) for {metric_vector.size} items, got shape "
                         f"{human_matrix.shape}")
    for rater in range(human_matrix.shape[1]):
        _check_pair(metric_vector, human_matrix[:, rater])
    rounded = np.around(metric_vector.astype(np.float32), ROUNDING)
    if rounded.min() == rounded.max():
        raise ValueError(f"all metric scores round to {rounded[0]}: the correlation is undefined")
    return rounded, human_matrix


def _rater_means(rounded: np.ndarray, human: np.ndarray) -> Tuple[Dict[str, float], float]:
    """Kendall tau-b and Spearman rho of ``rounded`` with each rater's scores, each summed over the raters in
    order, divided by their number and rounded, as ``compute_correlation_uniquehuman`` does; and the largest
    p-value."""
    from scipy import stats as scipy_stats

    raters = human.shape[1]
    largest_p = 0.0
    values = {}
    for name, test in (("spearman", scipy_stats.spearmanr), ("kendall_tau_b", scipy_stats.kendalltau)):
        total = 0.0
        for rater in range(raters):
            statistic, p_value = test(rounded, human[:, rater])
            total += statistic
            largest_p = max(largest_p, float(p_value))
        values[name] = float(np.around(total / raters, ROUNDING))
    return {name: values[name] for name in RATER_MEAN_STATISTICS}, largest_p


def rater_mean_correlations(metric: Sequence[float], human: np.ndarray) -> dict[str, float]:
    """EMScore's ``compute_correlation_uniquehuman``: the metric's scores rounded to 4 decimals as float32 (the
    reference's scores are float32), then ``scipy.stats.kendalltau`` (tau-b) and ``spearmanr`` with each rater's
    scores (columns of ``human``), each averaged over the raters and rounded to 4 decimals.

    The reference asserts that every p-value is below 0.01; here the correlations are returned whatever their
    p-values, with a warning when one is not."""
    rounded, human_matrix = _check_raters(metric, human)
    values, largest_p = _rater_means(rounded, human_matrix)
    if largest_p >= P_VALUE_BOUND:
        warnings.warn(f"a correlation with a rater has p-value {largest_p:.3g} (compute_correlation_uniquehuman "
                      f"asserts p < {P_VALUE_BOUND}); the correlations are reported all the same", stacklevel=2)
    return values


def rater_mean_replicates(
    metric: Sequence[float],
    human: np.ndarray,
    bootstrap: ImageBootstrap,
    *,
    progress: bool = False,
    description: str = "bootstrap",
) -> dict[str, np.ndarray]:
    """:func:`rater_mean_correlations` on every bootstrap resample; NaN where a resample is constant in the rounded
    scores or in a rater's scores."""
    rounded, human_matrix = _check_raters(metric, human)
    return _replicates(lambda scores, ratings: _rater_means(scores, ratings)[0], RATER_MEAN_STATISTICS, rounded,
                       human_matrix, bootstrap, progress, description)


def accuracy_replicates(
    credit: Sequence[float], categories: Optional[Sequence[str]], bootstrap: ImageBootstrap
) -> dict[str, np.ndarray]:
    """:func:`category_accuracies` on every bootstrap resample (vectorised over resamples); NaN where a resample
    holds no pair of some category."""
    credit_vector = np.asarray(credit, dtype=np.float64)
    if credit_vector.size != bootstrap.n_items:
        raise ValueError(f"{credit_vector.size} pairs but the bootstrap was built for {bootstrap.n_items} items")
    membership = _category_membership(credit_vector.size, categories)
    counts = bootstrap.image_counts().astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_category = (counts @ bootstrap.image_totals(membership * credit_vector[:, None])) / (
            counts @ bootstrap.image_totals(membership)
        )
    return _named_accuracies(per_category, categories)


@dataclass(frozen=True)
class Estimate:
    """A statistic, its bootstrap percentile interval and the number of resamples it rests on."""

    value: float
    ci_low: float
    ci_high: float
    n_resamples: int


def percentile_interval(value: float, replicates: np.ndarray, confidence: float = 0.95) -> Estimate:
    """Percentile bootstrap interval around ``value``; degenerate (NaN) resamples are left out and counted."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    finite = replicates[np.isfinite(replicates)]
    if finite.size == 0:
        raise ValueError("every bootstrap resample was degenerate (constant scores); use more images")
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(finite, [tail, 100.0 - tail])
    return Estimate(float(value), float(low), float(high), int(finite.size))


@dataclass(frozen=True)
class PairedComparison:
    """Paired bootstrap comparison of ``metric`` against ``baseline`` on one statistic."""

    metric: str
    baseline: str
    statistic: str
    difference: float
    ci_low: float
    ci_high: float
    p_value: float
    n_resamples: int


def paired_comparison(
    metric: str,
    baseline: str,
    statistic: str,
    metric_value: float,
    baseline_value: float,
    metric_replicates: np.ndarray,
    baseline_replicates: np.ndarray,
    confidence: float = 0.95,
) -> PairedComparison:
    """Is ``metric`` better than ``baseline`` on ``statistic``? Paired bootstrap over images.

    Both replicate arrays must come from the same :class:`ImageBootstrap`, so resample b holds the same images
    for both metrics. With the observed difference d = metric - baseline and the resampled differences d_b, the
    interval is the percentile interval of d_b, and the one-sided p-value for H0 "metric is not better"
    (d <= 0) shifts the bootstrap distribution to the null (Berg-Kirkpatrick et al., 2012):
    ``p = (1 + #{b: d_b - d >= d}) / (1 + B)`` over the B non-degenerate resamples.
    """
    differences = metric_replicates - baseline_replicates
    interval = percentile_interval(metric_value - baseline_value, differences, confidence)
    finite = differences[np.isfinite(differences)]
    observed = interval.value
    p_value = (1.0 + np.count_nonzero(finite - observed >= observed)) / (1.0 + finite.size)
    return PairedComparison(
        metric, baseline, statistic, observed, interval.ci_low, interval.ci_high, float(p_value), interval.n_resamples
    )

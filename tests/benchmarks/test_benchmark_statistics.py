"""Benchmark statistics checked against scipy, brute-force formulas and known bootstrap properties."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats as scipy_stats

from capeval.benchmarks import statistics


def _tied_data(size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Metric scores with ties (rounded) and discrete 1-4 human ratings, positively related."""
    rng = np.random.default_rng(seed)
    human = rng.integers(1, 5, size).astype(np.float64)
    metric = np.round(human + rng.normal(0.0, 1.5, size), 1)
    return metric, human


def _brute_force_kendall(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """tau_b and tau_c (Stuart 1953) from an explicit loop over all pairs."""
    concordant = discordant = ties_x = ties_y = 0
    for i, j in itertools.combinations(range(x.size), 2):
        product = np.sign(x[i] - x[j]) * np.sign(y[i] - y[j])
        concordant += product > 0
        discordant += product < 0
        ties_x += x[i] == x[j]
        ties_y += y[i] == y[j]
    pairs = x.size * (x.size - 1) / 2
    tau_b = (concordant - discordant) / np.sqrt((pairs - ties_x) * (pairs - ties_y))
    classes = min(len(set(x.tolist())), len(set(y.tolist())))
    tau_c = 2 * (concordant - discordant) / (x.size**2 * (classes - 1) / classes)
    return tau_b, tau_c


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_correlations_match_scipy(seed: int) -> None:
    metric, human = _tied_data(500, seed)
    result = statistics.correlations(metric, human)
    assert result["kendall_tau_b"] == pytest.approx(scipy_stats.kendalltau(metric, human, variant="b").statistic, abs=1e-12)
    assert result["kendall_tau_c"] == pytest.approx(scipy_stats.kendalltau(metric, human, variant="c").statistic, abs=1e-12)
    assert result["spearman"] == pytest.approx(scipy_stats.spearmanr(metric, human).statistic, abs=1e-12)
    assert result["pearson"] == pytest.approx(scipy_stats.pearsonr(metric, human).statistic, abs=1e-12)


def test_kendall_matches_brute_force_pair_count() -> None:
    metric, human = _tied_data(70, 3)
    metric[:5] = metric[5]  # a run of ties in the metric too
    tau_b, tau_c = _brute_force_kendall(metric, human)
    result = statistics.correlations(metric, human)
    assert result["kendall_tau_b"] == pytest.approx(tau_b, abs=1e-12)
    assert result["kendall_tau_c"] == pytest.approx(tau_c, abs=1e-12)
    assert abs(tau_b - tau_c) > 1e-3  # the two variants really differ on this data


def test_correlations_reject_bad_input() -> None:
    with pytest.raises(ValueError, match="human scores are equal"):
        statistics.correlations([1.0, 2.0, 3.0], [2.0, 2.0, 2.0])
    with pytest.raises(ValueError, match=r"metric scores\[1\] is nan"):
        statistics.correlations([1.0, float("nan"), 3.0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="3 metric scores but 2 human scores"):
        statistics.correlations([1.0, 2.0, 3.0], [1.0, 2.0])


def test_preference_credit_ties() -> None:
    preferred = [0.9, 0.2, 0.5, 0.5]
    other = [0.1, 0.8, 0.5, 0.4]
    assert statistics.preference_credit(preferred, other).tolist() == [1.0, 0.0, 0.5, 1.0]
    assert statistics.preference_credit(preferred, other, ties="wrong").tolist() == [1.0, 0.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="ties must be one of"):
        statistics.preference_credit(preferred, other, ties="coin")


def test_category_accuracies_are_an_unweighted_mean_over_categories() -> None:
    credit = [1, 1, 1, 0, 0.5, 1]
    categories = ["HC", "HC", "HC", "HI", "HI", "MM"]
    result = statistics.category_accuracies(credit, categories)
    assert result == pytest.approx(
        {"accuracy": (1.0 + 0.25 + 1.0) / 3, "accuracy_HC": 1.0, "accuracy_HI": 0.25, "accuracy_MM": 1.0}
    )
    assert list(result) == list(statistics.accuracy_names(categories))
    assert statistics.category_accuracies(credit) == pytest.approx({"accuracy": 4.5 / 6})


def test_bootstrap_resamples_whole_images() -> None:
    images = ["a", "b", "a", "c", "b", "a", "d"]
    bootstrap = statistics.ImageBootstrap(images, n_resamples=50, seed=7)
    image_names = sorted(set(images))
    counts = bootstrap.image_counts()
    assert counts.shape == (50, 4)
    assert (counts.sum(axis=1) == 4).all()
    for resample in range(50):
        drawn = [image_names[index] for index in bootstrap.drawn_images[resample]]
        item_counts = np.bincount(bootstrap.item_indices(resample), minlength=len(images))
        # every item appears exactly as often as its image was drawn
        assert item_counts.tolist() == [drawn.count(image) for image in images]
        assert counts[resample].tolist() == [drawn.count(image) for image in image_names]
    again = statistics.ImageBootstrap(images, n_resamples=50, seed=7)
    assert (again.drawn_images == bootstrap.drawn_images).all()


def test_bootstrap_variance_of_a_mean_is_the_image_level_plugin_variance() -> None:
    # 40 images of 5 items each, every item of an image has the same 0/1 credit: resampling images gives
    # Var*(mean) = var_population(image means) / n_images; resampling items would give a 5x smaller variance.
    rng = np.random.default_rng(0)
    image_credit = rng.integers(0, 2, 40).astype(np.float64)
    credit = np.repeat(image_credit, 5)
    images = np.repeat(np.arange(40), 5)
    bootstrap = statistics.ImageBootstrap(images, n_resamples=20000, seed=1)
    replicates = statistics.accuracy_replicates(credit, None, bootstrap)["accuracy"]
    expected = image_credit.var() / 40
    assert replicates.var() == pytest.approx(expected, rel=0.05)
    assert replicates.mean() == pytest.approx(image_credit.mean(), abs=0.01)


def test_accuracy_replicates_match_direct_computation_per_resample() -> None:
    rng = np.random.default_rng(4)
    credit = rng.choice([0.0, 0.5, 1.0], 60)
    categories = rng.choice(["HC", "HI", "MM"], 60).tolist()
    images = rng.integers(0, 25, 60)
    bootstrap = statistics.ImageBootstrap(images, n_resamples=30, seed=2)
    replicates = statistics.accuracy_replicates(credit, categories, bootstrap)
    for resample in range(30):
        indices = bootstrap.item_indices(resample)
        direct = statistics.category_accuracies(credit[indices], [categories[index] for index in indices])
        if len(direct) != len(replicates):  # a category absent from this resample: NaN there
            assert any(np.isnan(values[resample]) for values in replicates.values())
            continue
        for name, value in direct.items():
            assert replicates[name][resample] == pytest.approx(value, abs=1e-12)


def test_correlation_interval_collapses_when_every_image_is_identical() -> None:
    # Every image holds the same (metric, human) items, so any image resample has the full-data correlation.
    metric_one, human_one = _tied_data(12, 5)
    metric, human = np.tile(metric_one, 30), np.tile(human_one, 30)
    images = np.repeat(np.arange(30), 12)
    bootstrap = statistics.ImageBootstrap(images, n_resamples=25, seed=0)
    replicates = statistics.correlation_replicates(metric, human, bootstrap)
    full = statistics.correlations(metric, human)
    for name in statistics.CORRELATION_STATISTICS:
        assert replicates[name] == pytest.approx(np.full(25, full[name]), abs=1e-12)


def test_correlation_replicates_equal_scipy_on_the_resampled_items() -> None:
    metric, human = _tied_data(300, 6)
    images = np.arange(300) // 3
    bootstrap = statistics.ImageBootstrap(images, n_resamples=5, seed=3)
    replicates = statistics.correlation_replicates(metric, human, bootstrap)
    for resample in range(5):
        indices = bootstrap.item_indices(resample)
        expected = scipy_stats.kendalltau(metric[indices], human[indices], variant="c").statistic
        assert replicates["kendall_tau_c"][resample] == pytest.approx(expected, abs=1e-12)


def test_degenerate_resamples_are_left_out_and_counted() -> None:
    # Two images of one item each: a resample drawing the same image twice is constant (NaN).
    bootstrap = statistics.ImageBootstrap(["x", "y"], n_resamples=200, seed=0)
    replicates = statistics.correlation_replicates([0.1, 0.9], [1.0, 4.0], bootstrap)["pearson"]
    mixed = int(np.count_nonzero(bootstrap.drawn_images[:, 0] != bootstrap.drawn_images[:, 1]))
    assert 0 < mixed < 200
    estimate = statistics.percentile_interval(1.0, replicates)
    assert estimate.n_resamples == mixed
    assert estimate.ci_low == estimate.ci_high == pytest.approx(1.0)


def test_percentile_interval_bounds() -> None:
    replicates = np.arange(1001, dtype=np.float64)
    estimate = statistics.percentile_interval(500.0, replicates, confidence=0.9)
    assert (estimate.ci_low, estimate.ci_high) == pytest.approx((50.0, 950.0))


def test_paired_comparison_p_value_by_hand() -> None:
    # d = 0.25; d_b = [0, 0.25, 0.5, 0.75]; d_b - d >= d for 0.5 and 0.75: p = (1 + 2) / (1 + 4)
    comparison = statistics.paired_comparison(
        "a", "b", "pearson", 0.75, 0.5, np.array([0.5, 0.75, 1.0, 1.25]), np.full(4, 0.5), confidence=0.5
    )
    assert comparison.difference == 0.25
    assert comparison.p_value == pytest.approx(3 / 5)
    assert (comparison.ci_low, comparison.ci_high) == pytest.approx(tuple(np.percentile([0, 0.25, 0.5, 0.75], [25, 75])))


def test_paired_comparison_detects_the_better_metric() -> None:
    rng = np.random.default_rng(8)
    human = rng.integers(1, 5, 1500).astype(np.float64)
    better = human + rng.normal(0, 1.0, human.size)
    worse = human + rng.normal(0, 3.0, human.size)
    images = np.arange(human.size) // 3
    bootstrap = statistics.ImageBootstrap(images, n_resamples=300, seed=0)
    rep_better = statistics.correlation_replicates(better, human, bootstrap)["kendall_tau_c"]
    rep_worse = statistics.correlation_replicates(worse, human, bootstrap)["kendall_tau_c"]
    tau_better = statistics.correlations(better, human)["kendall_tau_c"]
    tau_worse = statistics.correlations(worse, human)["kendall_tau_c"]
    forward = statistics.paired_comparison("better", "worse", "kendall_tau_c", tau_better, tau_worse, rep_better, rep_worse)
    backward = statistics.paired_comparison("worse", "better", "kendall_tau_c", tau_worse, tau_better, rep_worse, rep_better)
    assert forward.difference == pytest.approx(tau_better - tau_worse)
    assert forward.ci_low > 0 and forward.p_value < 0.01
    assert backward.ci_high < 0 and backward.p_value > 0.99
    same = statistics.paired_comparison("a", "a", "kendall_tau_c", tau_better, tau_better, rep_better, rep_better)
    assert (same.difference, same.ci_low, same.ci_high, same.p_value) == (0.0, 0.0, 0.0, 1.0)


# ----------------------------------------------------------------------------------------------------------------
# Several raters per item (VATEX-EVAL)


def test_rater_mean_correlations_are_compute_correlation_uniquehuman() -> None:
    rng = np.random.default_rng(0)
    quality = rng.integers(1, 6, size=80)
    human = np.clip(quality[:, None] + rng.integers(-1, 2, size=(80, 3)), 1, 5).astype(np.float64)
    metric = 0.1 * quality + rng.normal(0, 0.05, 80)
    metric[:20] = 0.5 + rng.uniform(-4e-5, 4e-5, 20)  # distinct, but equal once rounded to 4 decimals
    # compute_correlation_uniquehuman: round the (float32) scores to 4 decimals, average each correlation over the
    # three raters, round the averages to 4 decimals
    rounded = np.around(metric.astype(np.float32), 4)
    kendall = sum(scipy_stats.kendalltau(rounded, human[:, rater])[0] for rater in range(3)) / 3
    spearman = sum(scipy_stats.spearmanr(rounded, human[:, rater])[0] for rater in range(3)) / 3
    values = statistics.rater_mean_correlations(metric, human)
    assert values == {"kendall_tau_b": np.around(kendall, 4), "spearman": np.around(spearman, 4)}
    unrounded = sum(scipy_stats.kendalltau(metric, human[:, rater])[0] for rater in range(3)) / 3
    assert abs(np.around(unrounded, 4) - values["kendall_tau_b"]) > 1e-3  # the rounding makes ties, as the reference


def test_rater_mean_correlations_warn_where_the_reference_asserts() -> None:
    human = np.array([[1, 2, 3], [2, 2, 1], [3, 1, 2], [4, 5, 5], [5, 3, 4]], dtype=np.float64)
    with pytest.warns(UserWarning, match=r"p-value .* asserts p < 0.01"):
        values = statistics.rater_mean_correlations([0.1, 0.3, 0.2, 0.5, 0.4], human)
    assert set(values) == {"kendall_tau_b", "spearman"}


def test_rater_mean_replicates_are_the_statistics_of_each_resample() -> None:
    rng = np.random.default_rng(5)
    quality = rng.integers(1, 6, size=120)
    human = np.clip(quality[:, None] + rng.integers(-1, 2, size=(120, 3)), 1, 5).astype(np.float64)
    metric = 0.1 * quality + rng.normal(0, 0.05, 120)
    bootstrap = statistics.ImageBootstrap([f"video{index // 6}" for index in range(120)], n_resamples=4, seed=1)
    replicates = statistics.rater_mean_replicates(metric, human, bootstrap)
    for resample in range(4):
        indices = bootstrap.item_indices(resample)
        expected = statistics.rater_mean_correlations(metric[indices], human[indices])
        assert {name: values[resample] for name, values in replicates.items()} == expected

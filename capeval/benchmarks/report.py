"""Benchmark reports: ``results.json`` (everything), ``results.md`` (paper-ready tables) and PNG plots."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Dict, List, Sequence, Union

import numpy as np

from capeval.benchmarks.statistics import TIE_CREDITS, Estimate
from capeval.benchmarks.runner import BenchmarkResult
from capeval.registry import BENCHMARK_METRICS
from capeval.version import __version__

METRIC_LABELS: Dict[str, str] = {
    "bleu1": "BLEU-1",
    "bleu2": "BLEU-2",
    "bleu3": "BLEU-3",
    "bleu4": "BLEU-4",
    "meteor": "METEOR",
    "rouge_l": "ROUGE-L",
    "cider": "CIDEr",
    "spice": "SPICE",
    **{name: metric.label for name, (_, metric) in BENCHMARK_METRICS.items()},
}
"""Display names of the built-in metrics; other metrics are shown by their own name."""

STATISTIC_LABELS: Dict[str, str] = {
    "kendall_tau_b": "Kendall τ_b",
    "kendall_tau_c": "Kendall τ_c",
    "spearman": "Spearman ρ",
    "pearson": "Pearson r",
    "accuracy": "Accuracy",
}

_ITEM_UNITS = {"pairwise": "caption pairs", "foil": "captions", "video_foil": "paragraphs"}
_CORRELATION_TASKS = ("correlation", "video_correlation")
_FOIL_TASKS = ("foil", "video_foil")

RESULTS_JSON = "results.json"
RESULTS_MARKDOWN = "results.md"


def metric_label(name: str) -> str:
    return METRIC_LABELS.get(name, name)


def statistic_label(name: str, task: str = "") -> str:
    """``accuracy`` is the mean over categories on pairwise benchmarks; ``accuracy_HC`` is category HC."""
    if name == "accuracy" and task == "pairwise":
        return "Mean"
    if name.startswith("accuracy_"):
        return name[len("accuracy_") :]
    return STATISTIC_LABELS.get(name, name)


def report_statistics(result: BenchmarkResult) -> tuple[str, ...]:
    """Table columns: the protocol's statistics (primary first); per category then the mean for pairwise tasks."""
    if result.benchmark.task == "pairwise":
        return result.statistic_names[1:] + result.statistic_names[:1]
    wanted = result.benchmark.statistics or (result.benchmark.primary_statistic,)
    return tuple(name for name in wanted if name in result.statistic_names) or result.statistic_names


def _percent(value: float) -> str:
    return f"{100.0 * value:.1f}"


def _unit(result: BenchmarkResult) -> str:
    """What the bootstrap resamples: the benchmark's images, or its videos."""
    return "video" if result.benchmark.video is not None else "image"


def _human_scores(result: BenchmarkResult) -> np.ndarray:
    """One human score per item: its rating, or the mean of its raters' scores."""
    human = np.asarray([item.human for item in result.benchmark.items], dtype=np.float64)
    return human.mean(axis=1) if human.ndim == 2 else human


def _estimate_dict(estimate: Estimate) -> Dict[str, Any]:
    return {
        "value": estimate.value,
        "ci_low": estimate.ci_low,
        "ci_high": estimate.ci_high,
        "n_resamples": estimate.n_resamples,
    }


def _items_dict(result: BenchmarkResult) -> Dict[str, Any]:
    items = result.benchmark.items
    task = result.benchmark.task
    unit = _unit(result)
    fields: Dict[str, Any] = {"key": [item.key for item in items], unit: [getattr(item, unit) for item in items]}
    if task in _CORRELATION_TASKS:
        fields["human"] = [item.human for item in items]
    elif task == "pairwise":
        fields["label"] = [item.label for item in items]
        fields["category"] = [item.category for item in items]
    else:
        fields["is_foil"] = [item.is_foil for item in items]
        if task == "foil":
            fields["pair"] = [item.pair for item in items]
    fields["scores"] = {name: _json_scores(metric.scores) for name, metric in result.metrics.items()}
    return fields


def _json_scores(scores: np.ndarray) -> list:
    """Scores as JSON values: NaN (a paragraph without a score, one of its segments holding no frame) as null."""
    values = scores.astype(object)
    values[np.isnan(scores)] = None
    return values.tolist()


def result_to_dict(result: BenchmarkResult) -> Dict[str, Any]:
    """Everything in the result as JSON-ready data; statistics are fractions (the Markdown shows them x 100)."""
    benchmark = result.benchmark
    return {
        "capeval_version": __version__,
        "benchmark": {
            "name": benchmark.name,
            "task": benchmark.task,
            "protocol": benchmark.protocol,
            "source": benchmark.source,
            "citation": benchmark.citation,
            "primary_statistic": benchmark.primary_statistic,
            "reported_statistics": list(report_statistics(result)),
            "n_items": result.n_items,
            f"n_{_unit(result)}s": result.n_images,
            "features_dir" if benchmark.video is not None else "image_dir": result.image_dir,
        },
        "bootstrap": {
            "unit": _unit(result),
            "n_resamples": result.n_resamples,
            "seed": result.seed,
            "confidence": result.confidence,
            "interval": "percentile",
        },
        "ties": result.ties,
        "method": {
            "scale": "statistics are fractions (correlations in [-1, 1], accuracies in [0, 1]); results.md shows x 100",
            "correlations": (
                "the mean over the raters of scipy.stats.kendalltau (tau-b) and spearmanr of (metric scores rounded "
                "to 4 decimals, rater's scores), rounded to 4 decimals (EMScore's compute_correlation_uniquehuman)"
                if benchmark.task == "video_correlation"
                else "scipy.stats.kendalltau (variants b and c), spearmanr, pearsonr of (metric, human)"
            ),
            "pairwise_ties": f"a pair the metric scores equally counts {TIE_CREDITS[result.ties]} ({result.ties})",
            "bootstrap": (
                f"{result.n_resamples} resamples of the {_unit(result)}s with replacement (all items of a drawn "
                f"{_unit(result)} included), numpy default_rng seed {result.seed}; {result.confidence:.0%} "
                "percentile intervals"
            ),
            "comparison": (
                "paired bootstrap (same resamples for both metrics) of metric - first metric; one-sided p-value of "
                "'not better': (1 + #{d_b - d >= d}) / (1 + B) (Berg-Kirkpatrick et al., 2012)"
            ),
        },
        "metrics": {
            name: {
                "label": metric_label(name),
                "signature": metric.signature,
                "seconds": metric.seconds,
                "statistics": {stat: _estimate_dict(estimate) for stat, estimate in metric.statistics.items()},
            }
            for name, metric in result.metrics.items()
        },
        "comparisons": [
            {
                "metric": comparison.metric,
                "baseline": comparison.baseline,
                "statistic": comparison.statistic,
                "difference": comparison.difference,
                "ci_low": comparison.ci_low,
                "ci_high": comparison.ci_high,
                "p_value": comparison.p_value,
                "n_resamples": comparison.n_resamples,
            }
            for comparison in result.comparisons
        ],
        "items": _items_dict(result),
    }


def _markdown_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def markdown_report(result: BenchmarkResult) -> str:
    """Markdown: a results table (values x 100 with their intervals, the best of each column in bold), paired
    comparisons with the first metric, signatures, the protocol."""
    benchmark = result.benchmark
    columns = report_statistics(result)
    confidence = f"{result.confidence:.0%}"
    lines = [
        f"## {benchmark.name}",
        "",
        f"{result.n_items:,} {_ITEM_UNITS.get(benchmark.task, 'items')}, {result.n_images:,} {_unit(result)}s. "
        f"Values x 100; [{confidence} bootstrap interval over {_unit(result)}s, {result.n_resamples:,} resamples, "
        f"seed {result.seed}].",
        "",
        _markdown_row(["Metric"] + [statistic_label(name, benchmark.task) for name in columns]),
        _markdown_row(["---"] + ["---:"] * len(columns)),
    ]
    best = {stat: _percent(max(metric.statistics[stat].value for metric in result.metrics.values())) for stat in columns}
    for name, metric in result.metrics.items():
        cells = []
        for stat in columns:
            value = _percent(metric.statistics[stat].value)
            shown = f"**{value}**" if value == best[stat] and len(result.metrics) > 1 else value
            estimate = metric.statistics[stat]
            cells.append(f"{shown} [{_percent(estimate.ci_low)}, {_percent(estimate.ci_high)}]")
        lines.append(_markdown_row([metric_label(name)] + cells))
    primary = benchmark.primary_statistic
    comparisons = [comparison for comparison in result.comparisons if comparison.statistic == primary]
    if comparisons:
        baseline = metric_label(comparisons[0].baseline)
        lines += [
            "",
            f"Paired bootstrap against {baseline} on {statistic_label(primary, benchmark.task)} (difference x 100, "
            f"{confidence} interval, one-sided p-value that the metric is not better):",
            "",
            _markdown_row(["Metric", f"Δ vs {baseline}", f"{confidence} interval", "p"]),
            _markdown_row(["---", "---:", "---:", "---:"]),
        ]
        for comparison in comparisons:
            lines.append(
                _markdown_row(
                    [
                        metric_label(comparison.metric),
                        f"{100.0 * comparison.difference:+.1f}",
                        f"[{100.0 * comparison.ci_low:+.1f}, {100.0 * comparison.ci_high:+.1f}]",
                        f"{comparison.p_value:.3f}",
                    ]
                )
            )
    if benchmark.task not in _CORRELATION_TASKS:
        lines += ["", f"A tie between the two captions of a pair counts {TIE_CREDITS[result.ties]:g}."]
    signatures = [(name, metric.signature) for name, metric in result.metrics.items() if metric.signature]
    if signatures:
        lines += ["", "Signatures:", ""] + [f"- {metric_label(name)}: `{signature}`" for name, signature in signatures]
    lines += ["", f"Protocol: {benchmark.protocol}", ""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------------------
# Plots


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    return pyplot


def plot_statistics(result: BenchmarkResult, path: Union[str, "os.PathLike[str]"]) -> None:
    """One panel per reported statistic: each metric's value with its interval, sorted by the primary statistic
    (best on top), values labelled."""
    pyplot = _pyplot()
    task = result.benchmark.task
    primary = result.benchmark.primary_statistic
    columns = (primary,) if task == "pairwise" else report_statistics(result)
    ordered = sorted(result.metrics, key=lambda name: result.metrics[name].statistics[primary].value)
    label_width = max(len(metric_label(name)) for name in ordered)
    figure, axes = pyplot.subplots(
        1,
        len(columns),
        figsize=(0.08 * label_width + 3.6 * len(columns), 1.3 + 0.4 * len(ordered)),
        squeeze=False,
        sharey=True,
    )
    rows = np.arange(len(ordered))
    for axis, stat in zip(axes[0], columns):
        estimates = [result.metrics[name].statistics[stat] for name in ordered]
        values = np.array([100.0 * estimate.value for estimate in estimates])
        lows = np.array([100.0 * estimate.ci_low for estimate in estimates])
        highs = np.array([100.0 * estimate.ci_high for estimate in estimates])
        axis.errorbar(
            values, rows, xerr=[values - lows, highs - values], fmt="o", color="tab:blue", ecolor="tab:gray",
            elinewidth=2, capsize=4, markersize=6,
        )
        for row, value, high in zip(rows, values, highs):
            axis.annotate(f"{value:.1f}", (high, row), xytext=(5, 0), textcoords="offset points", va="center", fontsize=9)
        span = max(highs.max() - lows.min(), 1.0)
        axis.set_xlim(lows.min() - 0.08 * span, highs.max() + 0.25 * span)
        chance, chance_style = (50.0, "--") if stat.startswith("accuracy") else (0.0, "-")
        if axis.get_xlim()[0] < chance < axis.get_xlim()[1]:
            axis.axvline(chance, color="dimgray", linestyle=chance_style, linewidth=0.8)
        title = "Mean accuracy over categories" if task == "pairwise" else statistic_label(stat, task)
        axis.set_xlabel(f"{title} x 100")
        axis.grid(axis="x", alpha=0.3)
        axis.set_title(f"{title} ({result.confidence:.0%} CI)", fontsize=11)
    axes[0][0].set_ylim(-0.6, len(ordered) - 0.4)
    axes[0][0].set_yticks(rows)
    axes[0][0].set_yticklabels([metric_label(name) for name in ordered])
    subject = {
        "correlation": "correlation with human judgments",
        "video_correlation": "correlation with human judgments (mean over raters)",
        "video_foil": "correct paragraph scored above its foil",
        "pairwise": "agreement with human preferences",
        "foil": "correct caption scored above its foil",
    }[task]
    figure.suptitle(f"{result.benchmark.name}: {subject}", fontsize=12)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    pyplot.close(figure)


def _grid(count: int) -> tuple[int, int]:
    columns = min(4, math.ceil(math.sqrt(count)))
    return math.ceil(count / columns), columns


def _rating_groups(human: np.ndarray, max_levels: int = 10, bins: int = 5) -> tuple[List[np.ndarray], List[str], bool]:
    """Item masks and tick labels per human rating level, and whether the levels were binned: more than
    ``max_levels`` levels are binned into ``bins`` equal-width intervals (empty ones left out)."""
    levels = np.unique(human)
    if levels.size <= max_levels:
        masks = [human == level for level in levels]
        names = [f"{level:g}" for level in levels]
    else:
        edges = np.linspace(levels[0], levels[-1], bins + 1)
        bin_of = np.clip(np.searchsorted(edges, human, side="right") - 1, 0, bins - 1)
        masks = [bin_of == index for index in range(bins)]
        names = [f"{edges[index]:.2g}-{edges[index + 1]:.2g}" for index in range(bins)]
    kept = [(mask, name) for mask, name in zip(masks, names) if mask.any()]
    labels = [f"{name}\nn={int(mask.sum()):,}" for mask, name in kept]
    return [mask for mask, _ in kept], labels, levels.size > max_levels


def plot_scores_vs_human(result: BenchmarkResult, path: Union[str, "os.PathLike[str]"]) -> None:
    """Per metric: box plots of the metric score per human rating level (binned when ratings are near-continuous)."""
    pyplot = _pyplot()
    masks, tick_labels, binned = _rating_groups(_human_scores(result))
    primary = result.benchmark.primary_statistic
    positions = np.arange(1, len(masks) + 1)
    grid_rows, grid_columns = _grid(len(result.metrics))
    figure, axes = pyplot.subplots(
        grid_rows, grid_columns, figsize=((1.2 + 0.7 * len(masks)) * grid_columns, 3.2 * grid_rows), squeeze=False
    )
    for axis, (name, metric) in zip(axes.ravel(), result.metrics.items()):
        groups = [metric.scores[mask] for mask in masks]
        axis.boxplot(groups, showfliers=False, widths=0.6, medianprops={"color": "tab:orange", "linewidth": 2})
        axis.plot(positions, [group.mean() for group in groups], "D", color="tab:blue", markersize=4)
        axis.set_xticks(positions)
        axis.set_xticklabels(tick_labels, fontsize=8)
        axis.set_xlabel("human rating" + (" (binned)" if binned else ""), fontsize=9)
        axis.set_ylabel("metric score", fontsize=9)
        axis.tick_params(axis="y", labelsize=8)
        value = metric.statistics[primary].value
        axis.set_title(f"{metric_label(name)}\n{statistic_label(primary)} = {100.0 * value:.1f}", fontsize=10)
    for axis in axes.ravel()[len(result.metrics) :]:
        axis.set_visible(False)
    figure.suptitle(f"{result.benchmark.name}: metric score by human rating", fontsize=12)
    figure.text(
        0.5, 0.01, "boxes: quartiles; whiskers: 1.5 IQR; diamonds: means", ha="center", va="bottom", fontsize=8,
        color="dimgray",
    )
    figure.tight_layout(rect=(0, 0.04, 1, 1))
    figure.savefig(path, dpi=120)
    pyplot.close(figure)


def plot_categories(result: BenchmarkResult, path: Union[str, "os.PathLike[str]"]) -> None:
    """Pairwise benchmarks: accuracy per category (and the mean) as grouped bars with intervals."""
    pyplot = _pyplot()
    columns = report_statistics(result)
    names = list(result.metrics)
    width = 0.8 / len(names)
    figure, axis = pyplot.subplots(figsize=(max(6.0, 1.2 + len(columns) * (0.5 + 0.28 * len(names))), 4.2))
    colors = pyplot.get_cmap("tab20" if len(names) > 10 else "tab10")
    lowest = 100.0
    for index, name in enumerate(names):
        estimates = [result.metrics[name].statistics[stat] for stat in columns]
        values = np.array([100.0 * estimate.value for estimate in estimates])
        lows = np.array([100.0 * estimate.ci_low for estimate in estimates])
        highs = np.array([100.0 * estimate.ci_high for estimate in estimates])
        lowest = min(lowest, lows.min())
        positions = np.arange(len(columns)) + (index - (len(names) - 1) / 2) * width
        axis.bar(positions, values, width, yerr=[values - lows, highs - values], capsize=2,
                 color=colors(index % colors.N), label=metric_label(name), error_kw={"elinewidth": 1})
        if len(names) <= 4:
            for position, value, high in zip(positions, values, highs):
                axis.annotate(f"{value:.1f}", (position, high), xytext=(0, 2), textcoords="offset points",
                              ha="center", fontsize=7)
    bottom = min(50.0, 10.0 * math.floor((lowest - 5.0) / 10.0))
    axis.set_ylim(max(bottom, 0.0), 100.0)
    axis.axhline(50.0, color="gray", linestyle="--", linewidth=1)
    axis.set_xticks(np.arange(len(columns)))
    axis.set_xticklabels([statistic_label(stat, "pairwise") for stat in columns])
    axis.set_ylabel("accuracy x 100")
    axis.grid(axis="y", alpha=0.3)
    axis.legend(fontsize=8, ncol=min(len(names), 4), loc="upper center", bbox_to_anchor=(0.5, -0.1), frameon=False)
    axis.set_title(
        f"{result.benchmark.name}: accuracy per category ({result.confidence:.0%} CI; ties count "
        f"{TIE_CREDITS[result.ties]:g}; dashed = chance)",
        fontsize=11,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    pyplot.close(figure)


def plot_foil_scores(result: BenchmarkResult, path: Union[str, "os.PathLike[str]"]) -> None:
    """FOIL: per metric, box plots of the scores of correct and of foil captions."""
    pyplot = _pyplot()
    is_foil = np.asarray([item.is_foil for item in result.benchmark.items])
    grid_rows, grid_columns = _grid(len(result.metrics))
    figure, axes = pyplot.subplots(grid_rows, grid_columns, figsize=(3.2 * grid_columns, 3.0 * grid_rows), squeeze=False)
    for axis, (name, metric) in zip(axes.ravel(), result.metrics.items()):
        scored = np.isfinite(metric.scores)
        axis.boxplot([metric.scores[~is_foil & scored], metric.scores[is_foil & scored]], showfliers=False, widths=0.6,
                     medianprops={"color": "tab:orange", "linewidth": 2})
        axis.set_xticks([1, 2])
        axis.set_xticklabels(["correct", "foil"])
        axis.set_ylabel("metric score", fontsize=9)
        axis.set_title(f"{metric_label(name)}\naccuracy = {_percent(metric.statistics['accuracy'].value)}", fontsize=10)
    for axis in axes.ravel()[len(result.metrics) :]:
        axis.set_visible(False)
    figure.suptitle(f"{result.benchmark.name}: scores of correct and foil captions", fontsize=12)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    pyplot.close(figure)


def write_report(result: BenchmarkResult, output_dir: Union[str, "os.PathLike[str]"]) -> List[Path]:
    """Write results.json, results.md and the task's plots into ``output_dir`` (created); return the paths."""
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    json_path, markdown_path = folder / RESULTS_JSON, folder / RESULTS_MARKDOWN
    json_path.write_text(json.dumps(result_to_dict(result), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    markdown_path.write_text(markdown_report(result), encoding="utf-8")
    task = result.benchmark.task
    plots = {"statistics.png": plot_statistics}
    if task in _CORRELATION_TASKS:
        plots["scores_by_human_rating.png"] = plot_scores_vs_human
    elif task == "pairwise":
        plots["accuracy_by_category.png"] = plot_categories
    else:
        plots["foil_scores.png"] = plot_foil_scores
    for file_name, plot in plots.items():
        plot(result, folder / file_name)
    return [json_path, markdown_path] + [folder / file_name for file_name in plots]

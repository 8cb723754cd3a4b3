"""Run any caption metric on a human-judgment benchmark and measure its agreement with the humans.

A metric is any callable ``f(images, candidates, references) -> per-item scores`` (``images``: image file paths,
or the benchmark's image names when no metric needs images; on a video benchmark, videos: feature file paths or
:class:`capeval.video.VideoFeatures`; ``references``: one list of strings per item). It is called ONCE over all
inputs, in benchmark order; items are not deduplicated (capeval's scorers encode each distinct image, video and text
once anyway). A callable may carry ``needs_images: bool`` (default True), ``check(images, candidates, references,
keys)``, which :func:`run_benchmark` calls for every metric before the first one runs and which raises on inputs
the metric cannot score (``keys`` names each input), and, after the call, ``signature: str``.

The video metrics are EMScore's (``emscore``, ``ref_emscore``) and video PAC-S / RefPAC-S (``pac_s``,
``ref_pac_s`` on a video benchmark): a ``capeval.EMScore`` scorer on EMScore's default model, or its subclass
``VideoPACScore`` on PAC-S's (what ``PACScore().score(videos=...)`` runs), made with the benchmark's IDF corpus and
frame sampling (:class:`capeval.benchmarks.VideoSetup`).
"""
from __future__ import annotations

import numbers
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from capeval.benchmarks.baselines import BASELINES
from capeval.benchmarks.datasets import Benchmark, VideoSetup, check_images
from capeval.benchmarks.statistics import (TIE_CREDITS, Estimate, ImageBootstrap, PairedComparison, paired_comparison,
                                           percentile_interval)
from capeval.benchmarks.tasks import MetricInputs, task_type
from capeval.inputs import InputError, validate_caption, validate_references
from capeval.models.regions.files import RegionLookup
from capeval.options import check_positive_int
from capeval.registry import BENCHMARK_METRICS, FAMILIES, BenchmarkMetric, scorer_class

if TYPE_CHECKING:
    from capeval.scorers.base import Scorer

ModelRef = Union[str, "os.PathLike[str]"]
MetricFn = Callable[[List[str], List[str], List[List[str]]], Sequence[float]]
"""``f(images, candidates, references) -> one score per candidate``."""

BASELINE_METRICS: tuple[str, ...] = tuple(BASELINES)
BUILTIN_METRICS: tuple[str, ...] = BASELINE_METRICS + tuple(BENCHMARK_METRICS)

VIDEO_FAMILY = "emscore"
"""The family whose scorer runs every video metric (video PAC-S on its subclass ``VideoPACScore``)."""

VIDEO_PAC_S: Dict[str, str] = {"pac_s": "emscore", "ref_pac_s": "ref_emscore"}
"""Video PAC-S / RefPAC-S (the PAC-S paper, Sec. 3.2): the EMScore metric with the same references, on PAC-S's
default model."""

VIDEO_METRICS: tuple[str, ...] = tuple(
    name for name, (family, _) in BENCHMARK_METRICS.items() if FAMILIES[family].inputs == "videos"
) + tuple(VIDEO_PAC_S)
"""The embedding metrics of the video benchmarks."""


class ScorerMetric:
    """One per-item result of a capeval scorer (``CLIPScore``, ``PACScore``...) as a benchmark metric callable."""

    needs_images = True

    def __init__(self, scorer: Scorer, result_key: str, uses_references: bool) -> None:
        self.scorer = scorer
        self.result_key = result_key
        self.uses_references = uses_references
        self.signature: Optional[str] = None

    def check(self, images: List[Any], candidates: List[str], references: List[List[str]], keys: Sequence[str]
              ) -> None:
        """Raise :class:`InputError` naming the item when a candidate, or a reference list this metric reads, is one
        the scorer refuses (empty, invisible or invalid text; no references, as with ``--references 0``)."""
        for index, candidate in enumerate(candidates):
            try:
                validate_caption(candidate, f"candidates[{index}]")
                if self.uses_references:
                    validate_references(references[index], index)
            except InputError as error:
                raise InputError(f"item {keys[index]!r}: {error}") from None

    def __call__(self, images: List[str], candidates: List[str], references: List[List[str]]) -> List[float]:
        result = self.scorer.score(images, candidates, references if self.uses_references else None)
        self.signature = result["signature"]
        return result[self.result_key]


def assign_models(
    names: Sequence[str],
    model: Optional[ModelRef] = None,
    models: Optional[Mapping[str, ModelRef]] = None,
) -> Dict[str, Optional[ModelRef]]:
    """The model of each embedding metric in ``names`` (``None``: the family's default).

    ``models`` gives a model per metric name; ``model`` applies to every other embedding metric, and only when these
    belong to one scorer family (CLIP-S and PAC-S have different default backbones, so one model for both is
    ambiguous). A model named for no selected embedding metric is refused.
    """
    models = dict(models or {})
    embedding = [name for name in names if name in BENCHMARK_METRICS]
    not_selected = [name for name in models if name not in embedding]
    if not_selected:
        raise InputError(f"a model is given for {', '.join(not_selected)}, which is not among the selected embedding "
                         f"metrics ({', '.join(embedding) or 'none'})")
    if model is not None:
        _check_shared_model(model, [name for name in embedding if name not in models])
    return {name: models.get(name, model) for name in embedding}


def _check_shared_model(model: ModelRef, rest: Sequence[str]) -> None:
    """Raise InputError unless the metrics ``rest`` (those without a model of their own) can share ``model``."""
    if not rest:
        raise InputError(f"model {str(model)!r} is given for no metric: every selected metric has its own model "
                         "or takes none")
    families = sorted({BENCHMARK_METRICS[name][0] for name in rest})
    if len(families) > 1:
        raise InputError(f"one model for {', '.join(rest)} is ambiguous ({' and '.join(families)} have different "
                         "default backbones); give a model per metric (capeval benchmark --model <metric>=<model>)")


class RegionFeatureMetric(ScorerMetric):
    """A region-based scorer's result (TIGEr, ViLBERTScore) read from precomputed region features keyed by image id,
    so that the benchmark's images are not needed: each item's image name (or file name, or stem) finds its
    features."""

    needs_images = False

    def __init__(self, scorer: Scorer, result_key: str, uses_references: bool, regions: RegionLookup) -> None:
        super().__init__(scorer, result_key, uses_references)
        self.regions = regions

    def check(self, images: List[Any], candidates: List[str], references: List[List[str]], keys: Sequence[str]
              ) -> None:
        """As :meth:`ScorerMetric.check`, and every image's regions must be in the file and be what the scorer takes
        (TIGEr: 36 regions of its feature width; ViLBERTScore: its region count, with boxes)."""
        super().check(images, candidates, references, keys)
        checked = set()
        for index, image in enumerate(images):
            if image in checked:
                continue
            checked.add(image)
            try:
                self.scorer.validate_entry(self.regions(image), index)
            except InputError as error:
                raise InputError(f"item {keys[index]!r}: {error}") from None

    def __call__(self, images: List[str], candidates: List[str], references: List[List[str]]) -> List[float]:
        regions = []
        for index, image in enumerate(images):
            try:
                regions.append(self.regions(image))
            except InputError as error:
                raise InputError(f"images[{index}]: {error}") from None
        return super().__call__(regions, candidates, references)  # type: ignore[arg-type]


def video_metric(name: str) -> Tuple[BenchmarkMetric, str]:
    """The EMScore result the video metric ``name`` reads (labelled as reports show it), and the family whose default
    model it runs on: EMScore's own metrics, or video PAC-S / RefPAC-S (:data:`VIDEO_PAC_S`) on PAC-S's model."""
    family, metric = BENCHMARK_METRICS[name]
    if name not in VIDEO_PAC_S:
        return metric, family
    return BENCHMARK_METRICS[VIDEO_PAC_S[name]][1]._replace(label=metric.label), family


def _check_metric_names(names: Sequence[str], benchmark: Optional[Benchmark]) -> None:
    """Raise InputError on a name that is not in ``BUILTIN_METRICS``, is listed twice, or scores images on a video
    benchmark (or videos on an image benchmark)."""
    unknown = [name for name in names if name not in BUILTIN_METRICS]
    if unknown:
        raise InputError(f"unknown metric(s) {', '.join(unknown)}; built-in metrics: {', '.join(BUILTIN_METRICS)}")
    duplicated = sorted({name for name in names if list(names).count(name) > 1})
    if duplicated:
        raise InputError(f"metric(s) listed twice: {', '.join(duplicated)}")
    if benchmark is not None and benchmark.video is not None:
        wrong = [name for name in names if name not in BASELINE_METRICS + VIDEO_METRICS]
        if wrong:
            raise InputError(f"metric(s) {', '.join(wrong)} score images; benchmark {benchmark.name!r} holds videos "
                             f"(its metrics: the baselines, {', '.join(VIDEO_METRICS)})")
        return
    wrong = [name for name in names if name in VIDEO_METRICS and name not in VIDEO_PAC_S]
    if wrong and benchmark is None:
        raise InputError(f"metric(s) {', '.join(wrong)} score videos with a video benchmark's IDF corpus and frame "
                         "sampling: pass benchmark=")
    if wrong:
        raise InputError(f"metric(s) {', '.join(wrong)} score videos; benchmark {benchmark.name!r} holds images")


def _video_scorer_metric(
    name: str,
    model: Optional[ModelRef],
    video: VideoSetup,
    scorers: Dict[Tuple[str, Optional[str]], Scorer],
    options: Dict[str, object],
) -> ScorerMetric:
    """Video metric ``name`` on ``model`` (``None``: the default of the family it stands for), its scorer shared by
    the metrics of one family and model in ``scorers`` and made with the benchmark's IDF corpus and frame sampling.
    Video PAC-S runs on :class:`~capeval.scorers.emscore.VideoPACScore`, as ``PACScore().score(videos=...)`` does, so
    that its signature (``pac_score|...``) and precision are the API's."""
    metric, default_of = video_metric(name)
    if default_of == VIDEO_FAMILY:
        make = scorer_class(VIDEO_FAMILY)
    else:
        from capeval.scorers.emscore import VideoPACScore

        make = VideoPACScore
        model = model if model is not None else FAMILIES[default_of].default_model
    key = (default_of, None if model is None else os.fspath(model))
    if key not in scorers:
        scorers[key] = make(model=model, idf_corpus=video.idf_corpus, num_frames=video.num_frames, **options)
    return ScorerMetric(scorers[key], metric.result_key, metric.uses_references)


def builtin_metrics(
    names: Sequence[str],
    *,
    benchmark: Optional[Benchmark] = None,
    model: Optional[ModelRef] = None,
    models: Optional[Mapping[str, ModelRef]] = None,
    device: Optional[str] = None,
    batch_size: int = 64,
    progress: bool = False,
    regions: Optional[Union[str, "os.PathLike[str]"]] = None,
    cache_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
) -> Dict[str, MetricFn]:
    """Metric callables for built-in names (``BUILTIN_METRICS``), in the given order, to run on ``benchmark``.

    The metrics of one family (``capeval.registry.BENCHMARK_METRICS``) with the same model share one scorer
    (``clip_s``/``ref_clip_s`` one ``capeval.CLIPScore``, ``pac_s``/``ref_pac_s`` one ``capeval.PACScore``), so each
    encodes every image and text once. On a video benchmark (``benchmark.video``) the metrics are ``emscore``,
    ``ref_emscore`` and video PAC-S / RefPAC-S ``pac_s``, ``ref_pac_s`` (:func:`video_metric`), run by
    ``capeval.EMScore`` scorers made with the benchmark's IDF corpus and frame sampling; they need ``benchmark``.
    ``models`` (metric name -> folder or hub id) and ``model`` choose the models, see :func:`assign_models`.
    ``progress`` shows the scorers' encoding progress bars. ``regions`` (a ``.npz`` keyed by image id, as ``capeval
    regions`` writes, or a bottom-up ``.tsv``) gives the region-based metrics (``tiger``, ``vilbert_*``) their
    precomputed region features instead of the images. ``cache_dir`` is every scorer's on-disk feature cache, so
    that a second run (another benchmark on the same images, more metrics of a family) encodes only what is new.
    """
    _check_metric_names(names, benchmark)
    chosen = assign_models(names, model, models)
    scorers: Dict[Tuple[str, Optional[str]], Scorer] = {}
    metrics: Dict[str, MetricFn] = {}
    region_lookup: Optional[RegionLookup] = None
    for name in names:
        if name in BASELINE_METRICS:
            metrics[name] = BASELINES[name]
            continue
        if benchmark is not None and benchmark.video is not None:
            metrics[name] = _video_scorer_metric(name, chosen[name], benchmark.video, scorers,
                                                 {"device": device, "batch_size": batch_size, "progress": progress,
                                                  "cache_dir": cache_dir})
            continue
        family, metric = BENCHMARK_METRICS[name]
        key = (family, None if chosen[name] is None else os.fspath(chosen[name]))
        if key not in scorers:
            scorers[key] = scorer_class(family)(model=chosen[name], device=device, batch_size=batch_size,
                                                progress=progress, cache_dir=cache_dir)
        if regions is not None and FAMILIES[family].region_features:
            if region_lookup is None:
                region_lookup = RegionLookup.from_file(regions)
            metrics[name] = RegionFeatureMetric(scorers[key], metric.result_key, metric.uses_references,
                                                region_lookup)
        else:
            metrics[name] = ScorerMetric(scorers[key], metric.result_key, metric.uses_references)
    return metrics


@dataclass
class MetricResult:
    """One metric on one benchmark: per-item scores, statistics with intervals, and what produced them."""

    name: str
    scores: np.ndarray
    """One score per item; ``(n_items, 2)`` for pairwise benchmarks (one column per candidate)."""
    statistics: Dict[str, Estimate]
    signature: Optional[str]
    seconds: float


@dataclass
class BenchmarkResult:
    """Every metric's result on one benchmark, and paired comparisons of each metric with the first one."""

    benchmark: Benchmark
    metrics: Dict[str, MetricResult]
    comparisons: List[PairedComparison]
    n_resamples: int
    confidence: float
    seed: int
    ties: str
    image_dir: Optional[str]
    n_images: int
    statistic_names: tuple[str, ...]

    @property
    def n_items(self) -> int:
        return len(self.benchmark.items)


def _call_metric(name: str, metric: MetricFn, inputs: MetricInputs, keys: Sequence[str]) -> np.ndarray:
    """The scores of ``metric`` on ``inputs``, checked: one finite number per input (``keys`` name them)."""
    raw = metric(*inputs)
    try:
        scores = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"metric {name!r} returned scores that are not numbers: {error}") from None
    if scores.shape != (len(keys),):
        raise ValueError(f"metric {name!r} returned scores of shape {scores.shape} for {len(keys)} inputs")
    bad = np.flatnonzero(~np.isfinite(scores))
    if bad.size:
        raise ValueError(
            f"metric {name!r} returned {scores[bad[0]]} for input {bad[0]} (item {keys[bad[0]]!r})"
            + (f" and {bad.size - 1} more non-finite scores" if bad.size > 1 else "")
        )
    return scores


def _check_run_options(
    metrics: Mapping[str, MetricFn], n_resamples: int, confidence: float, seed: int, ties: str
) -> None:
    """Raise on an option of :func:`run_benchmark` it cannot run with, before anything is scored."""
    if not metrics:
        raise ValueError("no metric to benchmark")
    check_positive_int(n_resamples, "n_resamples")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise InputError(f"seed must be an integer, got {type(seed).__name__} {seed!r}")
    if isinstance(confidence, bool) or not isinstance(confidence, numbers.Real) or not 0 < confidence < 1:
        raise InputError(f"confidence must be a number strictly between 0 and 1, got {confidence!r}")
    if ties not in TIE_CREDITS:
        raise ValueError(f"ties must be one of {sorted(TIE_CREDITS)}, got {ties!r}")


def _image_root(
    benchmark: Benchmark, metrics: Mapping[str, MetricFn], image_dir: Optional[Union[str, "os.PathLike[str]"]]
) -> Optional[Path]:
    """The images folder (``image_dir``, else the benchmark's own), its images checked when a metric needs them; a
    video benchmark's features folder."""
    if benchmark.video is not None:
        if image_dir is not None:
            raise InputError(f"benchmark {benchmark.name!r} reads its videos' feature files from "
                             f"{benchmark.video.features_dir!r}; it takes no images folder")
        return Path(benchmark.video.features_dir)
    needing_images = [name for name, metric in metrics.items() if getattr(metric, "needs_images", True)]
    folder = image_dir if image_dir is not None else benchmark.image_dir
    image_root = Path(folder) if folder else None
    if needing_images:
        if image_root is None:
            raise FileNotFoundError(
                f"metric(s) {', '.join(needing_images)} need the images of benchmark {benchmark.name!r}: "
                "pass image_dir=<folder>"
            )
        check_images(benchmark, image_root)
    return image_root


def _comparisons(
    results: Dict[str, MetricResult],
    replicates: Dict[str, Dict[str, np.ndarray]],
    statistic_names: Sequence[str],
    confidence: float,
) -> List[PairedComparison]:
    """Every metric after the first compared with the first one, statistic by statistic."""
    baseline = next(iter(results))
    return [
        paired_comparison(
            name,
            baseline,
            statistic,
            results[name].statistics[statistic].value,
            results[baseline].statistics[statistic].value,
            replicates[name][statistic],
            replicates[baseline][statistic],
            confidence,
        )
        for name in list(results)[1:]
        for statistic in statistic_names
    ]


def run_benchmark(
    benchmark: Benchmark,
    metrics: Mapping[str, MetricFn],
    image_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    ties: Optional[str] = None,
    on_metric: Optional[Callable[[str], None]] = None,
    progress: bool = False,
) -> BenchmarkResult:
    """Score ``benchmark`` with every metric and compute its statistics, bootstrap intervals and paired comparisons.

    ``image_dir`` defaults to ``benchmark.image_dir``; images are checked before any metric runs when a metric
    needs them (FileNotFoundError naming the missing files). A video benchmark reads its features folder
    (``benchmark.video``) and takes no ``image_dir``. ``n_resamples`` image-level (video-level) bootstrap resamples
    (seeded with ``seed``) give ``confidence`` percentile intervals; every metric is compared with the first one
    on the same resamples. ``ties`` is the credit of a pairwise/FOIL tie (see ``statistics.TIE_CREDITS``;
    ``None``: the benchmark's protocol, ``benchmark.ties``). ``on_metric(name)`` is called before each metric runs.
    ``progress`` shows a bar for each metric's scoring and for each bootstrap (scorers made with ``progress=True``
    add their encoding bars). The benchmark's task (:mod:`capeval.benchmarks.tasks`) says what the metrics are
    called with and which statistics they get.
    """
    from tqdm.auto import tqdm  # on use: ``capeval --help`` imports this module

    ties = benchmark.ties if ties is None else ties
    _check_run_options(metrics, n_resamples, confidence, seed, ties)
    kind = task_type(benchmark)
    image_root = _image_root(benchmark, metrics, image_dir)
    task = kind(benchmark.items, ties, progress)
    inputs, keys = task.inputs(image_root), task.keys()
    for name, metric in metrics.items():  # every metric's inputs, before the first one runs
        check = getattr(metric, "check", None)
        if check is not None:
            try:
                check(*inputs, keys)
            except InputError as error:
                raise InputError(f"metric {name!r} cannot run on benchmark {benchmark.name!r}: {error}") from None
    bootstrap = ImageBootstrap(task.groups, n_resamples, seed)
    results: Dict[str, MetricResult] = {}
    replicates: Dict[str, Dict[str, np.ndarray]] = {}
    for name, metric in metrics.items():
        if on_metric is not None:
            on_metric(name)
        start = time.perf_counter()
        with tqdm(total=1, desc=f"scoring {name}", unit="metric", leave=False, disable=not progress) as bar:
            scores = _call_metric(name, metric, inputs, keys)
            bar.update()
        seconds = time.perf_counter() - start
        scores, values, replicates[name] = task.evaluate(name, scores, bootstrap)
        estimates = {
            statistic: percentile_interval(values[statistic], replicates[name][statistic], confidence)
            for statistic in task.statistic_names
        }
        results[name] = MetricResult(name, scores, estimates, getattr(metric, "signature", None), seconds)
    return BenchmarkResult(
        benchmark=benchmark,
        metrics=results,
        comparisons=_comparisons(results, replicates, task.statistic_names, confidence),
        n_resamples=n_resamples,
        confidence=confidence,
        seed=seed,
        ties=ties,
        image_dir=str(image_root) if image_root is not None else None,
        n_images=bootstrap.n_images,
        statistic_names=task.statistic_names,
    )

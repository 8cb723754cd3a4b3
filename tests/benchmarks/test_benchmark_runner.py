"""The benchmark runner end to end: CLIP-S / RefCLIP-S on Flickr8k-Expert with a tiny model, reports, CLI."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy import stats as scipy_stats

from capeval.benchmarks import Benchmark, FoilItem, PairwiseItem, RatedItem, load_benchmark
from capeval.benchmarks.report import write_report
from capeval.benchmarks.runner import builtin_metrics, run_benchmark
from capeval.cli import build_parser, main
from capeval.commands import benchmark as benchmark_command
from fixtures.paths import REPO_ROOT, TESTS_DATA



@pytest.fixture(scope="module")
def flickr8k(capeval_test_data: Path) -> Path:
    return capeval_test_data / "flickr8k"


@pytest.fixture(scope="module")
def pascal50s(capeval_test_data: Path) -> Path:
    return capeval_test_data / "pascal50s"


def test_clip_s_on_flickr8k_expert_end_to_end(flickr8k, tiny_openai_clip, tmp_path) -> None:
    benchmark = load_benchmark("flickr8k-expert", flickr8k)
    metrics = builtin_metrics(["clip_s", "ref_clip_s"], model=tiny_openai_clip.hf_dir, device="cpu")
    result = run_benchmark(benchmark, metrics, flickr8k / "images_224", n_resamples=50)
    engine = metrics["clip_s"].scorer.engine
    assert metrics["ref_clip_s"].scorer is metrics["clip_s"].scorer  # one scorer, one set of embeddings
    assert engine.encoded["image"] == 1000  # every distinct image once, not once per item (16,992)
    unique_texts = {item.candidate for item in benchmark.items} | {r for item in benchmark.items for r in item.references}
    assert engine.encoded["text"] == len({" ".join(("A photo depicts " + t).split()).lower() for t in unique_texts})

    assert result.n_items == 16_992 and result.n_images == 1000
    for name in ("clip_s", "ref_clip_s"):
        metric = result.metrics[name]
        assert metric.scores.shape == (16_992,) and np.isfinite(metric.scores).all()
        assert metric.signature.startswith("clip_score|model:")
        for estimate in metric.statistics.values():
            assert np.isfinite([estimate.value, estimate.ci_low, estimate.ci_high]).all()
            assert estimate.ci_low < estimate.ci_high and estimate.n_resamples == 50

    paths = write_report(result, tmp_path / "report")
    report = json.loads((tmp_path / "report" / "results.json").read_text())
    assert (report["benchmark"]["name"], report["benchmark"]["n_items"]) == ("flickr8k-expert", 16_992)
    assert report["metrics"]["clip_s"]["signature"] == result.metrics["clip_s"].signature
    assert "clip_s" in (tmp_path / "report" / "results.md").read_text()
    pngs = [path for path in paths if path.suffix == ".png"]
    assert len(pngs) >= 2 and all(Image.open(path).size[0] > 300 for path in pngs)


def test_scorers_share_an_on_disk_cache(tiny_openai_clip, tmp_path) -> None:
    """``cache_dir`` (``capeval benchmark --cache-dir``) reaches every scorer: a second run encodes nothing."""
    images = sorted((REPO_ROOT / "examples" / "clipscore" / "images").glob("*.jpg"))
    candidates, references = ["a dog"] * len(images), [["a cat"]] * len(images)
    first = builtin_metrics(["ref_clip_s"], model=tiny_openai_clip.hf_dir, device="cpu", cache_dir=tmp_path / "c")
    scores = first["ref_clip_s"](images, candidates, references)
    assert sorted(path.name.split("-")[0] for path in (tmp_path / "c").glob("*.sqlite")) == ["image", "text"]
    again = builtin_metrics(["ref_clip_s"], model=tiny_openai_clip.hf_dir, device="cpu", cache_dir=tmp_path / "c")
    assert again["ref_clip_s"](images, candidates, references) == scores
    assert again["ref_clip_s"].scorer.engine.encoded == {"image": 0, "text": 0}
    parser = build_parser()
    args = parser.parse_args(["benchmark", "--dataset", "flickr8k-expert", "--metric", "clip_s", "--cache-dir", "x"])
    assert args.cache_dir == Path("x")


def test_cli_fails_early_naming_missing_images(flickr8k, tiny_openai_clip, tmp_path, capsys) -> None:
    images = tmp_path / "images"
    images.mkdir()
    (images / "1056338697_4f7d7ce270.jpg").write_bytes((flickr8k / "images_224" / "1056338697_4f7d7ce270.jpg").read_bytes())
    code = main(["benchmark", "--dataset", "flickr8k-expert", "--data-root", str(flickr8k), "--metric", "clip_s",
                 "--images", str(images), "--model", str(tiny_openai_clip.hf_dir), "--device", "cpu"])
    error = capsys.readouterr().err
    assert code == 2
    assert "999" in error and "106490881_5a2dd9b7bd.jpg" in error


def test_cli_rejects_unknown_metric(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["benchmark", "--dataset", "flickr8k-expert", "--metric", "bleu9"])
    assert "invalid choice: 'bleu9'" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------------------
# The runner with stand-in metrics on small hand-made benchmarks


class RecordingMetric:
    """A stand-in metric: scores from a per-candidate table, recording every call."""

    def __init__(self, table: dict, needs_images: bool = False) -> None:
        self.table = table
        self.needs_images = needs_images
        self.calls: list = []

    def __call__(self, images, candidates, references):
        self.calls.append((list(images), list(candidates), [list(refs) for refs in references]))
        return [self.table[candidate] for candidate in candidates]


def _rated_benchmark(images_per_item: int = 3) -> Benchmark:
    rng = np.random.default_rng(0)
    items = tuple(
        RatedItem(image=f"img{index // images_per_item}.jpg", candidate=f"caption {index}",
                  references=(f"ref a {index}", f"ref b {index}"), human=float(rng.integers(1, 5)), key=f"k{index}")
        for index in range(60)
    )
    return Benchmark(name="toy", task="correlation", items=items, protocol="toy protocol",
                     primary_statistic="kendall_tau_c", statistics=("kendall_tau_c", "kendall_tau_b"))


def test_correlation_run_matches_scipy_and_passes_items_in_order(tmp_path) -> None:
    benchmark = _rated_benchmark()
    rng = np.random.default_rng(1)
    human = np.array([item.human for item in benchmark.items])
    good = RecordingMetric({item.candidate: item.human + rng.normal(0, 1) for item in benchmark.items}, needs_images=True)
    noise = RecordingMetric({item.candidate: float(rng.normal()) for item in benchmark.items})
    for image in benchmark.images():
        (tmp_path / image).write_bytes(b"")  # check_images only looks for the files
    result = run_benchmark(benchmark, {"good": good, "noise": noise}, tmp_path, n_resamples=40, seed=3)

    assert len(good.calls) == 1 and len(noise.calls) == 1  # one call over all items
    images, candidates, references = good.calls[0]
    assert images == [str(tmp_path / item.image) for item in benchmark.items]
    assert candidates == [item.candidate for item in benchmark.items]
    assert references == [list(item.references) for item in benchmark.items]
    assert noise.calls[0][0] == images

    good_scores = np.array([good.table[item.candidate] for item in benchmark.items])
    noise_scores = np.array([noise.table[item.candidate] for item in benchmark.items])
    assert result.metrics["good"].scores.tolist() == good_scores.tolist()
    assert result.n_items == 60 and result.n_images == 20
    for name, scores in (("good", good_scores), ("noise", noise_scores)):
        stats = result.metrics[name].statistics
        assert stats["kendall_tau_c"].value == pytest.approx(scipy_stats.kendalltau(scores, human, variant="c").statistic)
        assert stats["kendall_tau_b"].value == pytest.approx(scipy_stats.kendalltau(scores, human, variant="b").statistic)
        assert stats["spearman"].value == pytest.approx(scipy_stats.spearmanr(scores, human).statistic)
        assert stats["pearson"].value == pytest.approx(scipy_stats.pearsonr(scores, human).statistic)
        assert all(estimate.n_resamples == 40 for estimate in stats.values())
    comparison = next(c for c in result.comparisons if c.statistic == "kendall_tau_c")
    assert (comparison.metric, comparison.baseline) == ("noise", "good")
    assert comparison.difference == pytest.approx(
        result.metrics["noise"].statistics["kendall_tau_c"].value - result.metrics["good"].statistics["kendall_tau_c"].value
    )
    assert len(result.comparisons) == len(result.statistic_names)  # every statistic, against the first metric only


def test_runner_fails_early_naming_missing_images(tmp_path) -> None:
    benchmark = _rated_benchmark()
    metric = RecordingMetric({item.candidate: 0.0 for item in benchmark.items}, needs_images=True)
    (tmp_path / "img0.jpg").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"19 of the 20 images .*img1\.jpg"):
        run_benchmark(benchmark, {"m": metric}, tmp_path)
    with pytest.raises(FileNotFoundError, match="metric.s. m need the images"):
        run_benchmark(benchmark, {"m": metric})
    assert metric.calls == []  # nothing ran


def test_metric_without_images_gets_image_names() -> None:
    benchmark = _rated_benchmark()
    metric = RecordingMetric({item.candidate: float(index % 7) for index, item in enumerate(benchmark.items)})
    run_benchmark(benchmark, {"text_only": metric}, n_resamples=5)
    assert metric.calls[0][0] == [item.image for item in benchmark.items]


@pytest.mark.parametrize(
    "scores, message",
    [
        ([0.5] * 59, r"metric 'bad' returned scores of shape \(59,\) for 60 inputs"),
        ([0.5] * 7 + [float("nan")] + [0.5] * 52, r"metric 'bad' returned nan for input 7 \(item 'k7'\)"),
    ],
)
def test_bad_metric_output_names_metric_and_item(scores, message) -> None:
    with pytest.raises(ValueError, match=message):
        run_benchmark(_rated_benchmark(), {"bad": _constant_metric(scores)}, n_resamples=5)


def _constant_metric(scores):
    def metric(images, candidates, references):
        return scores

    metric.needs_images = False
    return metric


def _pairwise_benchmark() -> Benchmark:
    rng = np.random.default_rng(2)
    items = []
    for index in range(80):
        first, second = "w " * int(rng.integers(1, 5)), "w " * int(rng.integers(1, 5))
        items.append(PairwiseItem(image=f"p{index % 50}.jpg", candidates=(f"a{index} {first}", f"b{index} {second}"),
                                  references=("r",), label=int(rng.integers(0, 2)), category=("HC", "HI", "MM")[index % 3],
                                  key=f"pair{index}"))
    return Benchmark(name="toy-pairs", task="pairwise", items=tuple(items), protocol="p", primary_statistic="accuracy",
                     statistics=("accuracy",))


@pytest.mark.parametrize("ties, tie_credit", [("half", 0.5), ("wrong", 0.0)])
def test_pairwise_accuracy_per_category_by_hand(ties, tie_credit, tmp_path) -> None:
    benchmark = _pairwise_benchmark()
    table = {c: float(len(c.split())) for item in benchmark.items for c in item.candidates}  # ties are frequent
    metric = RecordingMetric(table)
    result = run_benchmark(benchmark, {"words": metric}, n_resamples=30, ties=ties)

    _, candidates, _ = metric.calls[0]
    assert candidates == [i.candidates[0] for i in benchmark.items] + [i.candidates[1] for i in benchmark.items]
    credit: dict = {}
    for item in benchmark.items:
        preferred, other = table[item.candidates[item.label]], table[item.candidates[1 - item.label]]
        credit.setdefault(item.category, []).append(1.0 if preferred > other else tie_credit if preferred == other else 0.0)
    expected = {f"accuracy_{category}": np.mean(values) for category, values in credit.items()}
    stats = result.metrics["words"].statistics
    for name, value in expected.items():
        assert stats[name].value == pytest.approx(value)
    assert stats["accuracy"].value == pytest.approx(np.mean(list(expected.values())))
    assert result.metrics["words"].scores.shape == (80, 2)
    assert any(table[i.candidates[0]] == table[i.candidates[1]] for i in benchmark.items)  # ties were exercised

    paths = write_report(result, tmp_path)
    assert sorted(path.name for path in paths) == [
        "accuracy_by_category.png", "results.json", "results.md", "statistics.png"]
    table_header = (tmp_path / "results.md").read_text().splitlines()[4]
    assert table_header == "| Metric | HC | HI | MM | Mean |"
    report = json.loads((tmp_path / "results.json").read_text())
    assert report["ties"] == ties and len(report["items"]["scores"]["words"]) == 80


def _foil_benchmark(broken: bool = False) -> Benchmark:
    items = []
    for index in range(30):
        for is_foil in (False, True):
            items.append(FoilItem(image=f"f{index // 2}.jpg", candidate=f"{index} {'foil' if is_foil else 'orig'}",
                                  references=("r",), is_foil=is_foil and not (broken and index == 4),
                                  key=f"{index}#{is_foil}", pair=f"pair{index}"))
    return Benchmark(name="toy-foil", task="foil", items=tuple(items), protocol="f", primary_statistic="accuracy",
                     statistics=("accuracy",))


def test_foil_accuracy_by_hand(tmp_path) -> None:
    benchmark = _foil_benchmark()
    rng = np.random.default_rng(5)
    table = {item.candidate: float(rng.integers(0, 3)) for item in benchmark.items}
    result = run_benchmark(benchmark, {"m": RecordingMetric(table)}, n_resamples=30)
    credits = []
    for index in range(30):
        original, foil = table[f"{index} orig"], table[f"{index} foil"]
        credits.append(1.0 if original > foil else 0.5 if original == foil else 0.0)
    assert result.metrics["m"].statistics["accuracy"].value == pytest.approx(np.mean(credits))
    assert result.n_images == 15
    paths = write_report(result, tmp_path)
    assert {path.name for path in paths} >= {"foil_scores.png", "statistics.png"}


def test_foil_pair_without_a_foil_is_named() -> None:
    with pytest.raises(ValueError, match="FOIL pair 'pair4' must hold one correct and one foil caption"):
        run_benchmark(_foil_benchmark(broken=True), {"m": _constant_metric([0.0] * 60)}, n_resamples=5)


def test_cli_writes_table_and_files(pascal50s, monkeypatch, tmp_path, capsys) -> None:
    """The command's plumbing on pascal50s-50S with a stand-in for the built-in metrics."""
    benchmark = load_benchmark("pascal-50s", pascal50s)
    requested = {}

    def fake_builtin_metrics(names, **options):
        requested.update(names=list(names), **options)
        return {name: RecordingMetric({c: float(len(c)) for i in benchmark.items for c in i.candidates})
                for name in names}

    monkeypatch.setattr(benchmark_command, "builtin_metrics", fake_builtin_metrics)
    code = main(["benchmark", "--dataset", "pascal-50s", "--data-root", str(pascal50s), "--metric", "cider",
                 "--metric", "bleu4", "--model", "some/model", "--bootstrap", "20", "--seed", "4",
                 "--output", str(tmp_path / "out")])
    printed = capsys.readouterr().out
    assert code == 0
    assert requested.pop("benchmark").name == "pascal-50s"  # the scorers of video metrics read its video setup
    assert requested == {"names": ["cider", "bleu4"], "model": "some/model", "models": {}, "device": None,
                         "batch_size": 64, "progress": True, "regions": None, "cache_dir": None}
    assert "| Metric | HC | HI | HM | MM | Mean |" in printed and "| CIDEr |" in printed
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    assert report["bootstrap"]["n_resamples"] == 20 and report["bootstrap"]["seed"] == 4
    assert report["benchmark"]["n_items"] == 4000
    assert (tmp_path / "out" / "results.md").read_text().startswith("## pascal-50s")

    class OtherProcess:
        is_main_process = False

    monkeypatch.setattr("capeval.runtime.process_state", OtherProcess)
    assert main(["benchmark", "--dataset", "pascal-50s", "--data-root", str(pascal50s), "--metric", "cider",
                 "--bootstrap", "2", "--output", str(tmp_path / "other")]) == 0
    assert capsys.readouterr() == ("", "")  # under accelerate launch only the main process prints and writes
    assert requested["progress"] is False and not (tmp_path / "other" / "results.json").exists()


def test_cli_composite_drop_first_reference(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    loaded = []
    monkeypatch.setattr(benchmark_command, "load_benchmark",
                        lambda *args, **options: loaded.append(options) or load_benchmark(*args, **options))
    data = TESTS_DATA / "benchmarks" / "composite"
    assert main(["benchmark", "--dataset", "composite", "--data-root", str(data), "--metric", "bleu1",
                 "--composite-drop-first-reference", "--bootstrap", "2"]) == 0
    assert loaded == [{"source": "auto", "drop_first_reference": True}]
    assert main(["benchmark", "--dataset", "pascal-50s", "--metric", "bleu1", "--composite-drop-first-reference"]) == 2
    assert "--composite-drop-first-reference applies to --dataset composite, not pascal-50s" in capsys.readouterr().err


def test_cli_rejects_zero_resamples(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["benchmark", "--dataset", "pascal-50s", "--metric", "cider", "--bootstrap", "0"])
    assert "must be at least 1" in capsys.readouterr().err

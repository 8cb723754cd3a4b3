"""The video benchmarks run: VATEX-EVAL's correlations as compute_correlation_uniquehuman computes them, the
ActivityNet-FOIL accuracy rule and the reports, with stand-in metrics on small releases written in the demos' layout
(tests/fixtures/video_benchmarks)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from capeval.benchmarks import load_benchmark, run_benchmark, write_report
from capeval.benchmarks.datasets.activitynet_foil import segment_frames
from capeval.benchmarks.statistics import rater_mean_correlations
from capeval.inputs import InputError
from capeval.video import VideoFeatures
from fixtures.video_benchmarks import write_activitynet_foil, write_vatex_eval


class Recording:
    """A stand-in metric: a score per candidate from ``table``, recording its inputs."""

    needs_images = True

    def __init__(self, table) -> None:
        self.table = table
        self.calls: list = []

    def __call__(self, videos, candidates, references):
        self.calls.append((list(videos), list(candidates), [list(refs) for refs in references]))
        return [self.table[candidate] for candidate in candidates]


@pytest.mark.filterwarnings("ignore:a correlation with a rater has p-value:UserWarning")  # 12 random items
def test_vatex_eval_run_statistics_and_report(tmp_path: Path) -> None:
    release = write_vatex_eval(tmp_path / "vatex")
    benchmark = load_benchmark("vatex-eval", release.folder, references=9)
    human = np.asarray([item.human for item in benchmark.items])
    rng = np.random.default_rng(3)
    metric = Recording({candidate: float(rng.normal()) for candidate in release.candidates})
    result = run_benchmark(benchmark, {"stand_in": metric}, n_resamples=30)

    videos, candidates, references = metric.calls[0]
    features = release.folder / "VATEX-EVAL_video_feats"
    assert videos == [str(features / f"{video}.pt") for video in release.videos]
    assert candidates == release.candidates and references == release.references
    scores = np.array([metric.table[candidate] for candidate in release.candidates])
    statistics = result.metrics["stand_in"].statistics
    assert {name: estimate.value for name, estimate in statistics.items()} == rater_mean_correlations(scores, human)
    assert result.n_images == 4 and result.image_dir == str(features)  # the bootstrap resamples the 4 videos

    write_report(result, tmp_path / "report")
    report = json.loads((tmp_path / "report" / "results.json").read_text())
    assert (report["benchmark"]["n_videos"], report["benchmark"]["features_dir"]) == (4, str(features))
    assert report["bootstrap"]["unit"] == "video" and report["items"]["video"] == release.videos
    assert report["items"]["human"] == human.tolist()
    markdown = (tmp_path / "report" / "results.md").read_text()
    assert "12 items, 4 videos" in markdown and "Kendall τ_b" in markdown and "Spearman ρ" in markdown
    assert (tmp_path / "report" / "scores_by_human_rating.png").is_file()
    with pytest.raises(InputError, match="reads its videos' feature files from .*takes no images folder"):
        run_benchmark(benchmark, {"stand_in": metric}, tmp_path, n_resamples=5)


def _anet(folder: Path, extra_segment=(20.0, 29.0)):
    return write_activitynet_foil(
        folder,
        segments={"v_aaa": [(0.0, 4.5), (4.0, 11.0), (10.5, 20.0)], "v_bbb": [(1.0, 9.0), extra_segment]},
        durations={"v_aaa": 20.0, "v_bbb": 30.0},
        frames={"v_aaa": 40, "v_bbb": 17},
    )


def _table(release) -> dict:
    """Scores by sentence: v_aaa's correct paragraph above its foil, v_bbb's two paragraphs equal."""
    table = {}
    for index, sentence in enumerate(release.correct["v_aaa"] + release.correct["v_bbb"]):
        table[sentence] = 0.1 * (index + 1)
    table[release.foiled["v_aaa"][0]] = table[release.correct["v_aaa"][0]] - 0.05
    table[release.foiled["v_bbb"][0]] = table[release.correct["v_bbb"][0]]
    return table


def test_activitynet_foil_accuracy_is_strictly_higher_paragraph_means(tmp_path: Path) -> None:
    release = _anet(tmp_path / "anet")
    benchmark = load_benchmark("activitynet-foil", release.folder)
    metric = Recording(_table(release))
    result = run_benchmark(benchmark, {"stand_in": metric}, n_resamples=20)

    videos, candidates, references = metric.calls[0]
    expected = [(item, sentence) for item in benchmark.items for sentence in range(len(item.sentences))]
    assert candidates == [item.sentences[sentence] for item, sentence in expected]
    assert references == [list(item.references[sentence]) for item, sentence in expected]
    for video, (item, sentence) in zip(videos, expected):
        rows = segment_frames(item.timestamps[sentence], len(release.features[item.video]), item.duration)
        assert isinstance(video, VideoFeatures) and len(rows) > 0
        np.testing.assert_array_equal(video.features, release.features[item.video][rows.start:rows.stop])

    means = [np.mean([metric.table[sentence] for sentence in item.sentences]) for item in benchmark.items]
    assert result.metrics["stand_in"].scores.tolist() == means
    assert result.ties == "wrong"  # the demo counts a video only when the correct paragraph scores strictly higher
    assert result.metrics["stand_in"].statistics["accuracy"].value == 0.5  # v_bbb's tie is a failure
    half = run_benchmark(benchmark, {"stand_in": metric}, n_resamples=20, ties="half")
    assert half.metrics["stand_in"].statistics["accuracy"].value == 0.75


def test_a_segment_without_frames_fails_its_video(tmp_path: Path) -> None:
    # 8.0 * 17 // 30 and 8.5 * 17 // 30 are both 4: v_bbb's second segment holds no frame
    release = _anet(tmp_path / "anet", extra_segment=(8.0, 8.5))
    benchmark = load_benchmark("activitynet-foil", release.folder)
    table = _table(release)
    table[release.foiled["v_bbb"][0]] -= 0.05  # v_bbb's correct paragraph would win if it could be scored
    metric = Recording(table)
    with pytest.warns(UserWarning, match=r"2 segment\(s\) hold no frame .* 2 paragraph\(s\) get no score"):
        result = run_benchmark(benchmark, {"stand_in": metric}, n_resamples=20, ties="half")
    assert metric.calls[0][1] == release.correct["v_aaa"] + release.foiled["v_aaa"]  # v_bbb is not scored at all
    scores = result.metrics["stand_in"].scores
    assert np.isnan(scores[2:]).all() and np.isfinite(scores[:2]).all()
    assert result.metrics["stand_in"].statistics["accuracy"].value == 0.5
    write_report(result, tmp_path / "report")
    report = json.loads((tmp_path / "report" / "results.json").read_text())
    assert report["items"]["scores"]["stand_in"][2:] == [None, None]
    assert "4 paragraphs, 2 videos" in (tmp_path / "report" / "results.md").read_text()

"""The video benchmarks run: VATEX-EVAL's correlations as compute_correlation_uniquehuman computes them, the
ActivityNet-FOIL accuracy rule, reports and the command, with stand-in metrics on small releases written in the demos'
layout (tests/fixtures/video_benchmarks)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from capeval.benchmarks import builtin_metrics, load_benchmark, run_benchmark, write_report
from capeval.benchmarks.datasets.activitynet_foil import segment_frames
from capeval.benchmarks.statistics import rater_mean_correlations
from capeval.cli import main
from capeval.inputs import InputError
from capeval.video import VideoFeatures
from fixtures.paths import TESTS_DATA
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


@pytest.mark.filterwarnings("ignore:a correlation with a rater has p-value:UserWarning")
def test_vatex_eval_baselines_are_the_image_benchmarks_baselines(tmp_path: Path, capsys) -> None:
    from capeval.benchmarks.baselines import compute_baselines

    release = write_vatex_eval(tmp_path / "vatex")
    code = main(["benchmark", "--dataset", "vatex-eval", "--data-root", str(release.folder), "--references", "9",
                 "--metric", "bleu1", "--metric", "cider", "--bootstrap", "10", "--output", str(tmp_path / "out")])
    assert code == 0 and "| BLEU-1 |" in capsys.readouterr().out
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    expected = compute_baselines(release.candidates, release.references, ["BLEU-1", "CIDEr"])
    assert report["items"]["scores"]["bleu1"] == expected["BLEU-1"]
    assert report["items"]["scores"]["cider"] == expected["CIDEr"]
    human = np.asarray(report["items"]["human"])
    for name, baseline in (("bleu1", "BLEU-1"), ("cider", "CIDEr")):
        values = rater_mean_correlations(expected[baseline], human)
        assert report["metrics"][name]["statistics"]["kendall_tau_b"]["value"] == values["kendall_tau_b"]


def test_command_refuses_options_a_video_benchmark_does_not_take(tmp_path: Path, capsys) -> None:
    release = write_vatex_eval(tmp_path / "vatex")
    assert main(["benchmark", "--dataset", "flickr8k-expert", "--data-root", str(release.folder), "--references",
                 "1", "--metric", "bleu1"]) == 2
    assert "--references applies to --dataset" in capsys.readouterr().err
    assert main(["benchmark", "--dataset", "vatex-eval", "--data-root", str(release.folder), "--images",
                 str(tmp_path), "--metric", "bleu1"]) == 2
    assert "takes no images folder" in capsys.readouterr().err
    assert main(["benchmark", "--dataset", "vatex-eval", "--data-root", str(release.folder), "--metric", "clip_s"]) == 2
    assert "clip_s score images; benchmark 'vatex-eval' holds videos" in capsys.readouterr().err
    foil = TESTS_DATA / "benchmarks" / "foil"
    assert main(["benchmark", "--dataset", "foil", "--data-root", str(foil), "--metric", "ref_emscore"]) == 2
    assert "ref_emscore score videos; benchmark 'foil' holds images" in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore:a correlation with a rater has p-value:UserWarning")
def test_command_runs_emscore_on_vatex_eval(tmp_path: Path, tiny_openai_clip, capsys) -> None:
    release = write_vatex_eval(tmp_path / "vatex", width=64)
    code = main(["benchmark", "--dataset", "vatex-eval", "--data-root", str(release.folder), "--references", "0",
                 "--metric", "emscore", "--model", str(tiny_openai_clip.hf_dir), "--device", "cpu", "--bootstrap",
                 "10", "--output", str(tmp_path / "out")])
    printed = capsys.readouterr().out
    assert code == 0 and "| EMScore |" in printed and "| Metric | Kendall τ_b | Spearman ρ |" in printed
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    assert report["metrics"]["emscore"]["signature"].startswith("emscore_video_full_f|")
    assert "the first 0 of its references" in report["benchmark"]["protocol"]


def test_every_metric_is_checked_against_the_benchmark_before_the_first_runs(tmp_path: Path, tiny_openai_clip,
                                                                              capsys) -> None:
    release = write_vatex_eval(tmp_path / "vatex", width=64)
    code = main(["benchmark", "--dataset", "vatex-eval", "--data-root", str(release.folder), "--references", "0",
                 "--metric", "emscore", "--metric", "ref_emscore", "--model", str(tiny_openai_clip.hf_dir),
                 "--device", "cpu", "--bootstrap", "10"])
    error = capsys.readouterr().err
    assert code == 2
    assert "metric 'ref_emscore' cannot run on benchmark 'vatex-eval': item " in error
    assert "references[0] is empty; reference-based scores need at least one reference" in error
    assert "running emscore" not in error  # the first metric never ran
    code = main(["benchmark", "--dataset", "vatex-eval", "--data-root", str(release.folder), "--references", "0",
                 "--metric", "emscore", "--metric", "bleu1", "--model", str(tiny_openai_clip.hf_dir), "--device",
                 "cpu", "--bootstrap", "10"])
    error = capsys.readouterr().err
    assert code == 2 and "metric 'bleu1' cannot run on benchmark 'vatex-eval': item " in error
    assert "references[0] is empty: BLEU-1 needs at least one reference" in error and "running emscore" not in error


# ----------------------------------------------------------------------------------------------------------------
# End to end with tiny converted CLIPs: capeval's EMScore scorer run as the demos run it


def _demo_sampled(rows: np.ndarray) -> np.ndarray:
    """VATEX-EVAL-demo.py's frame sampling: ``data[[int(index) for index in np.linspace(0, len(data) - 1, 10)]]``."""
    return rows[[int(index) for index in np.linspace(0, len(rows) - 1, 10)]]


@pytest.mark.filterwarnings("ignore:a correlation with a rater has p-value:UserWarning")
def test_vatex_eval_end_to_end_equals_the_scorer_on_the_demos_frames(tmp_path, tiny_openai_clip, tiny_openclip) -> None:
    from capeval import EMScore, PACScore

    release = write_vatex_eval(tmp_path / "vatex", width=64)
    benchmark = load_benchmark("vatex-eval", release.folder, references=1)
    models = {"emscore": tiny_openai_clip.hf_dir, "ref_emscore": tiny_openai_clip.hf_dir,
              "pac_s": tiny_openclip.hf_dir, "ref_pac_s": tiny_openclip.hf_dir}
    metrics = builtin_metrics(list(models), benchmark=benchmark, models=models, device="cpu")
    assert metrics["emscore"].scorer is metrics["ref_emscore"].scorer is not metrics["pac_s"].scorer
    assert metrics["pac_s"].scorer is metrics["ref_pac_s"].scorer and metrics["pac_s"].scorer.num_frames == 10
    result = run_benchmark(benchmark, metrics, n_resamples=20)

    videos = [VideoFeatures(_demo_sampled(release.features[video])) for video in release.videos]
    references = [refs[:1] for refs in release.references]
    human = np.asarray([item.human for item in benchmark.items])
    for model, (free, with_references) in ((tiny_openai_clip, ("emscore", "ref_emscore")),
                                           (tiny_openclip, ("pac_s", "ref_pac_s"))):
        direct = EMScore(model.hf_dir, device="cpu", idf_corpus=release.corpus).score(videos, release.candidates,
                                                                                       references)
        for name, key in ((free, "emscore_video_full_fs"), (with_references, "emscore_video_refs_full_fs")):
            assert result.metrics[name].scores.tolist() == direct[key]
            values = {stat: estimate.value for stat, estimate in result.metrics[name].statistics.items()}
            assert values == rater_mean_correlations(direct[key], human)
    assert result.metrics["emscore"].scores.tolist() != result.metrics["pac_s"].scores.tolist()
    signature = result.metrics["emscore"].signature
    assert f"|idf:corpus-{len(release.corpus)}-" in signature and "|frames:10|" in signature
    # video PAC-S signs as PACScore().score(videos=...) does, the benchmark's IDF corpus and frames aside
    pac_s = result.metrics["pac_s"].signature
    api = PACScore(tiny_openclip.hf_dir, device="cpu").score(videos=videos, candidates=release.candidates)["signature"]
    assert pac_s == result.metrics["ref_pac_s"].signature and pac_s.startswith("pac_score|")

    def fields(text: str) -> dict:
        return dict(field.split(":", 1) for field in text.split("|")[1:])

    assert {**fields(pac_s), "idf": "references", "frames": "all"} == {**fields(api), "idf": "references"}


def test_activitynet_foil_end_to_end_equals_the_scorer_on_the_segments(tmp_path, tiny_openai_clip) -> None:
    from capeval import EMScore

    release = write_activitynet_foil(
        tmp_path / "anet64", width=64,
        segments={"v_aaa": [(0.0, 4.5), (4.0, 11.0), (10.5, 20.0)], "v_bbb": [(1.0, 9.0), (20.0, 29.0)],
                  "v_ccc": [(2.0, 3.5)]},
        durations={"v_aaa": 20.0, "v_bbb": 30.0, "v_ccc": 5.0}, frames={"v_aaa": 40, "v_bbb": 17, "v_ccc": 12})
    benchmark = load_benchmark("activitynet-foil", release.folder)
    metrics = builtin_metrics(["emscore", "ref_emscore"], benchmark=benchmark, model=tiny_openai_clip.hf_dir,
                              device="cpu")
    assert metrics["emscore"].scorer.num_frames is None
    result = run_benchmark(benchmark, metrics, n_resamples=20)

    segments, candidates, references, spans = [], [], [], []
    for item in benchmark.items:
        spans.append((len(candidates), len(candidates) + len(item.sentences)))
        for sentence, timestamp, refs in zip(item.sentences, item.timestamps, item.references):
            rows = segment_frames(timestamp, len(release.features[item.video]), item.duration)
            segments.append(VideoFeatures(release.features[item.video][rows.start:rows.stop]))
            candidates.append(sentence)
            references.append(list(refs))
    direct = EMScore(tiny_openai_clip.hf_dir, device="cpu", idf_corpus=release.corpus).score(segments, candidates,
                                                                                            references)
    for name, key in (("emscore", "emscore_video_full_fs"), ("ref_emscore", "emscore_video_refs_full_fs")):
        means = np.array([np.mean(direct[key][start:end]) for start, end in spans])
        np.testing.assert_array_equal(result.metrics[name].scores, means)
        correct, foiled = means[0::2], means[1::2]
        assert result.metrics[name].statistics["accuracy"].value == np.mean(correct > foiled)

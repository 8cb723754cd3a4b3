"""The benchmark runner end to end: CLIP-S / RefCLIP-S on Flickr8k-Expert with a tiny model, reports, CLI."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from capeval.benchmarks import load_benchmark
from capeval.benchmarks.report import write_report
from capeval.benchmarks.runner import builtin_metrics, run_benchmark
from capeval.cli import main

FLICKR = Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k"


def test_clip_s_on_flickr8k_expert_end_to_end(tiny_openai_clip, tmp_path) -> None:
    benchmark = load_benchmark("flickr8k-expert", FLICKR)
    metrics = builtin_metrics(["clip_s", "ref_clip_s"], model=tiny_openai_clip.hf_dir, device="cpu")
    result = run_benchmark(benchmark, metrics, FLICKR / "images_224", n_resamples=50)
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


def test_cli_fails_early_naming_missing_images(tiny_openai_clip, tmp_path, capsys) -> None:
    images = tmp_path / "images"
    images.mkdir()
    (images / "1056338697_4f7d7ce270.jpg").write_bytes((FLICKR / "images_224" / "1056338697_4f7d7ce270.jpg").read_bytes())
    code = main(["benchmark", "--dataset", "flickr8k-expert", "--data-root", str(FLICKR), "--metric", "clip_s",
                 "--images", str(images), "--model", str(tiny_openai_clip.hf_dir), "--device", "cpu"])
    error = capsys.readouterr().err
    assert code == 2
    assert "999" in error and "106490881_5a2dd9b7bd.jpg" in error


def test_cli_rejects_unknown_metric(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["benchmark", "--dataset", "flickr8k-expert", "--metric", "bleu9"])
    assert "invalid choice: 'bleu9'" in capsys.readouterr().err

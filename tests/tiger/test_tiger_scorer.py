"""TIGErScore: parity with the original code through the public API, inputs, region sources and warnings."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from capeval import InputError, ModelNotAvailableError, RegionFeatures, TIGErScore
from test_tiger_parity import convert_synthetic
from fixtures.isolated import DETECTOR_MODULES, run_isolated
from fixtures.paths import REPO_ROOT
from fixtures.tiger_checkpoints import load_goldens, synthetic_regions

GOLDENS = load_goldens()
CASES = GOLDENS["cases"]
IMG_DIM = CASES["models"]["tiny"]["img_dim"]


@pytest.fixture(scope="module")
def scorer(tmp_path_factory: pytest.TempPathFactory, nltk_data: Path) -> TIGErScore:
    import nltk

    folder = convert_synthetic("tiny", tmp_path_factory.mktemp("tiny_scan"))
    saved = list(nltk.data.path)
    nltk.data.path[:] = [str(nltk_data)]
    try:
        return TIGErScore(model=folder, device="cpu", batch_size=4, text_batch_size=5)
    finally:
        nltk.data.path[:] = saved


def regions_of(image_id: str) -> RegionFeatures:
    image = next(image for image in CASES["images"] if image["id"] == image_id)
    return RegionFeatures(features=synthetic_regions(IMG_DIM, image["seed"], image["tied_rows"]))


def test_scores_match_the_original(scorer: TIGErScore) -> None:
    items = CASES["items"]
    regions = {image["id"]: regions_of(image["id"]) for image in CASES["images"]}
    result = scorer.score([regions[item["image"]] for item in items], [item["candidate"] for item in items],
                          [item["references"] for item in items])
    assert sorted(result) == ["rrs_scores", "signature", "tiger_score", "tiger_scores", "wds_scores"]
    golden = GOLDENS["models"]["tiny"]
    np.testing.assert_allclose(result["tiger_scores"], golden["tiger"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(result["rrs_scores"], golden["rrs"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(result["wds_scores"], golden["wds"], rtol=0, atol=1e-6)
    assert result["tiger_score"] == pytest.approx(np.mean(golden["tiger"]), abs=1e-6)
    assert result["signature"].startswith("tiger_score|model:") and "|lambda:9.0|tau:1.5|" in result["signature"]
    distinct_texts = {text for item in items for text in [item["candidate"], *item["references"]]}
    assert scorer.engine.encoded["scan_regions"] == len(regions)
    assert scorer.engine.encoded["scan_words"] == len(distinct_texts)
    again = scorer.score([regions["img0"]], [items[0]["candidate"]], [items[0]["references"]])
    assert again["tiger_scores"] == result["tiger_scores"][:1]
    assert scorer.engine.encoded["scan_regions"] == len(regions)  # served from the cache


def test_disk_cache_gives_the_same_scores(tmp_path: Path, scorer: TIGErScore, nltk_data: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import nltk

    monkeypatch.setattr(nltk.data, "path", [str(nltk_data)])
    item = CASES["items"][5]
    args = ([regions_of(item["image"])], [item["candidate"]], [item["references"]])
    first = TIGErScore(model=scorer.scan.folder, device="cpu", cache_dir=tmp_path).score(*args)
    fresh = TIGErScore(model=scorer.scan.folder, device="cpu", cache_dir=tmp_path)
    assert fresh.score(*args)["tiger_scores"] == first["tiger_scores"]
    assert fresh.engine.encoded == {"scan_regions": 0, "scan_words": 0, "tiger_grounding": 0}


@pytest.mark.parametrize("features, message", [
    (np.zeros((35, IMG_DIM), np.float32), "has 35 regions; this model needs 36"),
    (np.zeros((36, IMG_DIM + 1), np.float32), f"has {IMG_DIM + 1} columns; this model needs {IMG_DIM}"),
    (np.zeros((36,), np.float32), "must be a \\(regions, dim\\) array"),
    (np.full((36, IMG_DIM), "x"), "must hold real numbers"),
    (np.full((36, IMG_DIM), np.nan, np.float32), "holds NaN or infinite values"),
    (np.full((36, IMG_DIM), np.inf, np.float64), "holds NaN or infinite values"),
])
def test_bad_region_features_name_the_item(scorer: TIGErScore, features: np.ndarray, message: str) -> None:
    good = regions_of("img0")
    with pytest.raises(InputError, match=rf"images\[1\]\.features {message}" if "images" not in message else message):
        scorer.score([good, RegionFeatures(features=features)], ["a dog", "a cat"], [["a dog"], ["a cat"]])


@pytest.mark.parametrize("references, message", [
    (None, "TIGEr needs references"),
    ([["a dog"], []], r"references\[1\] is empty"),
    ([["a dog"], ["  "]], r"references\[1\]\[0\] is empty"),
    ([["a dog"], "a cat"], r"references\[1\] must be a list of strings"),
])
def test_references_are_required(scorer: TIGErScore, references, message: str) -> None:
    with pytest.raises(InputError, match=message):
        scorer.score([regions_of("img0")] * 2, ["a dog", "a cat"], references)


def test_empty_caption_is_an_error(scorer: TIGErScore) -> None:
    with pytest.raises(InputError, match=r"candidates\[0\] is empty"):
        scorer.score([regions_of("img0")], [""], [["a dog"]])


def test_precomputed_regions_never_load_a_detector(scorer: TIGErScore, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> None:
        raise AssertionError("the detector was loaded")

    monkeypatch.setattr(scorer, "_load_extractor", refuse)
    result = scorer.score([regions_of("img1")], ["a man"], [["a man in a hat"]])
    assert len(result["tiger_scores"]) == 1


def test_image_entries_go_through_the_region_source(scorer: TIGErScore, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []

    def detector(images):
        seen.append([image.size for image in images])
        return [regions_of("img2") for _ in images]

    monkeypatch.setattr(scorer, "_extractor", detector)
    image = np.zeros((6, 9, 3), dtype=np.uint8)
    result = scorer.score([image, regions_of("img2")], ["a cat", "a cat"], [["a cat sits"], ["a cat sits"]])
    assert seen == [[(9, 6)]]
    assert result["tiger_scores"][0] == result["tiger_scores"][1]


def test_image_entries_load_the_bottom_up_detector(scorer: TIGErScore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline and not cached, the default detector cannot be had: the error names it and its pinned revision, and
    the argument that takes a local folder instead."""
    monkeypatch.setattr(scorer, "_extractor", None)
    with pytest.raises(ModelNotAvailableError, match=r"capeval/bottom-up-frcnn-r101-vg' \(revision 'v1.0'\)") as error:
        scorer.score([np.zeros((6, 9, 3), dtype=np.uint8)], ["a cat"], [["a cat"]])
    assert "pass regions=<local folder> with a converted model (see conversion/convert_regions.py)" in str(error.value)


def test_identical_regions_get_the_defined_result_and_a_warning(scorer: TIGErScore) -> None:
    same = RegionFeatures(features=np.tile(synthetic_regions(IMG_DIM, 5, [])[:1], (36, 1)))
    with pytest.warns(UserWarning, match=r"raises for 1 item\(s\).*1 with constant reference grounding"):
        result = scorer.score([same, regions_of("img0")], ["a dog", "a dog"], [["a cat"], ["a cat"]])
    assert result["rrs_scores"][0] == 1.0


def first_item_per_image() -> dict:
    chosen = {}
    for item in CASES["items"]:
        chosen.setdefault(item["image"], item)
    return chosen


def test_evaluate_module_equals_the_scorer(scorer: TIGErScore, offline_punkt: None) -> None:
    import evaluate

    module = evaluate.load(str(REPO_ROOT / "metrics" / "tigerscore"))
    items = list(first_item_per_image().values())
    images = [regions_of(item["image"]) for item in items]
    result = module.compute(predictions=[item["candidate"] for item in items], images=images,
                            references=[item["references"] for item in items], model=str(scorer.scan.folder),
                            device="cpu")
    default = TIGErScore(model=scorer.scan.folder, device="cpu")  # the module's batch sizes
    expected = default.score(images, [item["candidate"] for item in items], [item["references"] for item in items])
    assert result == expected
    with pytest.raises(InputError, match="TIGEr needs references"):
        module.compute(predictions=["a dog"], images=images[:1], model=str(scorer.scan.folder), device="cpu")


def test_cli_scores_precomputed_regions(tmp_path: Path, scorer: TIGErScore, offline_punkt: None,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The command's scores are the originals', and its signature the API's though its model folder is given relative
    to the working directory."""
    import json

    from capeval.cli import main

    chosen = first_item_per_image()
    np.savez(tmp_path / "regions.npz", **{key: regions_of(key).features for key in chosen})
    (tmp_path / "cands.json").write_text(json.dumps({key: item["candidate"] for key, item in chosen.items()}))
    (tmp_path / "refs.json").write_text(json.dumps({key: item["references"] for key, item in chosen.items()}))
    monkeypatch.chdir(scorer.scan.folder.parent)
    code = main(["score", "--metric", "tigerscore", "--regions", str(tmp_path / "regions.npz"),
                 "--candidates", str(tmp_path / "cands.json"), "--references", str(tmp_path / "refs.json"),
                 "--model", scorer.scan.folder.name, "--device", "cpu", "--output", str(tmp_path / "out.json")])
    assert code == 0
    report = json.loads((tmp_path / "out.json").read_text())
    api = scorer.score([regions_of(key) for key in chosen], [item["candidate"] for item in chosen.values()],
                       [item["references"] for item in chosen.values()])
    assert report["signature"] == api["signature"]
    assert report["signature"].startswith(f"tiger_score|model:{scorer.scan.folder.resolve()}|")
    golden = GOLDENS["models"]["tiny"]["tiger"]
    for key, item in chosen.items():
        assert report["scores"][key]["tiger_score"] == pytest.approx(golden[CASES["items"].index(item)], abs=1e-6)


def test_benchmark_metric_reads_regions_by_image_name(tmp_path: Path, scorer: TIGErScore, offline_punkt: None) -> None:
    from capeval.benchmarks.runner import builtin_metrics

    chosen = first_item_per_image()
    np.savez(tmp_path / "regions.npz", **{key: regions_of(key).features for key in chosen})
    metric = builtin_metrics(["tiger"], model=scorer.scan.folder, device="cpu", regions=tmp_path / "regions.npz")["tiger"]
    assert getattr(metric, "needs_images") is False
    items = list(chosen.values())
    scores = metric([f"{item['image']}.jpg" for item in items], [item["candidate"] for item in items],
                    [item["references"] for item in items])
    golden = GOLDENS["models"]["tiny"]["tiger"]
    np.testing.assert_allclose(scores, [golden[CASES["items"].index(item)] for item in items], rtol=0, atol=1e-6)
    with pytest.raises(InputError, match=r"images\[0\]: no regions for image 'img9.jpg' in .*regions.npz"):
        metric(["img9.jpg"], ["a dog"], [["a dog"]])
    # what the benchmark runner checks for every metric before the first one runs
    images = [f"{item['image']}.jpg" for item in items]
    candidates, references = [item["candidate"] for item in items], [item["references"] for item in items]
    keys = [f"key{index}" for index in range(len(items))]
    metric.check(images, candidates, references, keys)
    with pytest.raises(InputError, match=r"item 'key1': no regions for image 'img9.jpg' in .*regions.npz"):
        metric.check([images[0], "img9.jpg"], candidates[:2], references[:2], keys)
    with pytest.raises(InputError, match=r"item 'key1': references\[1\] is empty"):
        metric.check(images[:2], candidates[:2], [references[0], []], keys)
    first = items[0]["image"]
    np.savez(tmp_path / "short.npz", **{first: regions_of(first).features[:35]})
    short = builtin_metrics(["tiger"], model=scorer.scan.folder, device="cpu", regions=tmp_path / "short.npz")["tiger"]
    with pytest.raises(InputError, match=r"item 'key0': images\[0\].features has 35 regions; this model needs 36"):
        short.check(images[:1], candidates[:1], references[:1], keys)


def test_warm_scoring_of_precomputed_regions_never_loads_nor_imports_a_detector(
        scorer: TIGErScore, nltk_data: Path, tmp_path: Path) -> None:
    """In a fresh process, cold then warm (a new scorer on the filled cache folder): every way of loading a detector
    raises, no detector module is imported, the warm run computes nothing and both give the goldens."""
    result = run_isolated(f"""
        import nltk
        nltk.data.path[:] = [{str(nltk_data)!r}]
        from capeval import RegionFeatures, TIGErScore
        from fixtures.tiger_checkpoints import load_goldens, synthetic_regions

        cases = load_goldens()["cases"]
        dim = cases["models"]["tiny"]["img_dim"]
        regions = {{image["id"]: RegionFeatures(features=synthetic_regions(dim, image["seed"], image["tied_rows"]))
                   for image in cases["images"]}}
        items = cases["items"]
        inputs = ([regions[item["image"]] for item in items], [item["candidate"] for item in items],
                  [item["references"] for item in items])
        runs = []
        for _ in range(2):
            fresh = TIGErScore(model={str(scorer.scan.folder)!r}, device="cpu", cache_dir={str(tmp_path)!r})
            runs.append((fresh.score(*inputs)["tiger_scores"], dict(fresh.engine.encoded)))
        result = {{"cold": runs[0][0], "warm": runs[1][0], "warm_encoded": runs[1][1]}}
    """)
    assert not DETECTOR_MODULES & set(result["modules"])
    assert result["warm_encoded"] == {"scan_regions": 0, "scan_words": 0, "tiger_grounding": 0}
    assert result["warm"] == result["cold"]
    np.testing.assert_allclose(result["warm"], GOLDENS["models"]["tiny"]["tiger"], rtol=0, atol=1e-6)

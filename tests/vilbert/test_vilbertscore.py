"""capeval.ViLBERTScore end to end on the tiny converted ViLBERT: the original's goldens, reference counts, batching,
the regions hook, bad input (tests/data/vilbert/NOTE.md), and its text states in the engine's caches and processes."""
from __future__ import annotations

import json
import shutil
import threading
import warnings
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
from PIL import Image
from safetensors.torch import load_file, save_file

import capeval
from capeval import InputError, RegionFeatures
from capeval.hub import CHECKSUMS_NAME
from fixtures.isolated import DETECTOR_MODULES, run_isolated
from fixtures.paths import REPO_ROOT
from fixtures.vilbert_checkpoints import convert_checkpoint, load_regions, unpack_checkpoint

RESULT_KEYS = ["signature", "vilbert_f1", "vilbert_f1s", "vilbert_precision", "vilbert_precisions", "vilbert_recall",
               "vilbert_recalls"]


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    scratch = tmp_path_factory.mktemp("vilbert_scorer")
    return convert_checkpoint(unpack_checkpoint(scratch), scratch / "converted")


@pytest.fixture(scope="module")
def regions() -> List[RegionFeatures]:
    return load_regions()


@pytest.fixture(scope="module")
def scorer(model_folder: Path) -> "capeval.ViLBERTScore":
    return capeval.ViLBERTScore(model=str(model_folder), device="cpu", batch_size=4, num_regions=100)


def test_scores_match_the_original(scorer, items, regions, goldens):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = scorer.score(regions, [item["candidate"] for item in items], [item["references"] for item in items])
    assert sorted(result) == RESULT_KEYS
    for row, name in enumerate(("vilbert_precision", "vilbert_recall", "vilbert_f1")):
        np.testing.assert_allclose(result[name + "s"], goldens["averaged"][row], rtol=0, atol=1e-6, err_msg=name)
        assert result[name] == pytest.approx(float(np.mean(goldens["averaged"][row])), abs=1e-6)
    # the long caption (as candidate and as a reference) and the 36-wordpiece reference are cut
    assert [w.message.positions for w in caught] == [((5, None), (5, 1), (6, 0))]
    assert "exceed the model's 37-token context and were truncated, cutting the tail, [SEP] included" in str(
        caught[0].message)
    assert result["signature"].startswith("vilbert_f1|model:") and "|task:7|layer:-1|max_len:37|" in result["signature"]


def test_any_number_of_references_is_averaged(scorer, items, regions, goldens):
    one = scorer.score([regions[2]], [items[2]["candidate"]], [items[2]["references"][:1]])
    assert one["vilbert_precisions"][0] == pytest.approx(goldens["precision"][2][0], abs=1e-6)
    assert one["vilbert_f1s"][0] == pytest.approx(goldens["f1"][2][0], abs=1e-6)
    three = scorer.score([regions[8]], [items[8]["candidate"]], [items[8]["references"][2:]])
    assert three["vilbert_recalls"][0] == pytest.approx(float(np.mean(goldens["recall"][8][2:])), abs=1e-6)


def test_batch_size_does_not_change_scores(model_folder, items, regions, scorer):
    inputs = (regions[:4], [item["candidate"] for item in items[:4]], [item["references"] for item in items[:4]])
    large = capeval.ViLBERTScore(model=str(model_folder), device="cpu", batch_size=64).score(*inputs)
    np.testing.assert_allclose(large["vilbert_f1s"], scorer.score(*inputs)["vilbert_f1s"], rtol=0, atol=1e-6)


def test_images_go_through_the_detector_loaded_on_first_need(model_folder, regions, monkeypatch, tmp_path):
    from capeval.models.regions.detectors import DETECTORS

    loads = []

    def load(model=None, revision=None, device=None, parameter="model"):
        loads.append((model, parameter))
        raise capeval.ModelNotAvailableError("no detector here")

    monkeypatch.setattr(type(DETECTORS["x152-fpn"]), "load", lambda self, *args, **kwargs: load(*args, **kwargs))
    scorer = capeval.ViLBERTScore(model=str(model_folder), device="cpu")
    scorer.score([regions[0], regions[1]], ["a dog", "a cat"], [["a dog"], ["a cat"]])
    assert loads == []  # precomputed regions never load the detector
    image = tmp_path / "photo.png"
    Image.new("RGB", (32, 24)).save(image)
    with pytest.raises(capeval.ModelNotAvailableError, match="no detector here"):
        scorer.score([regions[0], image], ["a dog", "a cat"], [["a dog"], ["a cat"]])
    assert loads == [(None, "regions")]  # the default detector, asked for once an image needs it
    named = capeval.ViLBERTScore(model=str(model_folder), device="cpu", regions=str(tmp_path / "detector"))
    with pytest.raises(capeval.ModelNotAvailableError, match="no detector here"):
        named.score([image], ["a dog"], [["a dog"]])
    assert loads[-1] == (str(tmp_path / "detector"), "regions")  # the hub id or folder regions= names


def test_signature_records_what_made_the_regions(scorer, regions):
    made = RegionFeatures(regions[0].features, regions[0].boxes, regions[0].image_size, source="x152@v9(settings)")
    assert "|detector:" not in scorer.score([regions[0]], ["a dog"], [["a dog"]])["signature"]
    signature = scorer.score([made, regions[1]], ["a dog", "a cat"], [["a dog"], ["a cat"]])["signature"]
    assert "|regions:100+global|refs:mean|detector:unrecorded + x152@v9(settings)|" in signature
    assert "|detector:" not in scorer.score([regions[1]], ["a dog"], [["a dog"]])["signature"]  # per call


def test_default_detector_caches_its_regions_in_the_cache_folder(model_folder, regions, monkeypatch, tmp_path):
    from capeval.models.regions.detectors import DETECTORS
    from capeval.scorers import vilbertscore

    made = []

    class RecordingExtractor:
        def __init__(self, detector, settings, **options):
            made.append((detector, settings, options))

        def region_features(self, items):
            return [regions[0] for _ in items]

    monkeypatch.setattr(type(DETECTORS["x152-fpn"]), "load", lambda self, *args, **kwargs: "x152-fpn detector")
    monkeypatch.setattr(vilbertscore, "RegionExtractor", RecordingExtractor)
    image = tmp_path / "photo.png"
    Image.new("RGB", (32, 24)).save(image)
    scorer = capeval.ViLBERTScore(model=str(model_folder), device="cpu", cache_dir=tmp_path / "cache")
    result = scorer.score([image, regions[0]], ["a dog", "a dog"], [["a cat"], ["a cat"]])
    assert made == [("x152-fpn detector", DETECTORS["x152-fpn"].settings, {"cache_dir": tmp_path / "cache"})]
    assert result["vilbert_f1s"][0] == result["vilbert_f1s"][1]


def test_images_are_detected_a_chunk_at_a_time_on_the_scoring_thread(model_folder, regions, tmp_path):
    """Detection (an engine request, a collective under ``accelerate launch``) never runs in the validation
    threads: each chunk's images go to the extractor in one call from the thread that scores."""
    from capeval.models.regions.extraction import RegionExtractor

    calls = []

    class RecordingExtractor(RegionExtractor):
        def __init__(self) -> None:  # no detector: regions come from the fixtures
            pass

        def region_features(self, items):
            calls.append(([item.index for item in items], threading.current_thread() is threading.main_thread()))
            return [regions[item.index % 2] for item in items]

    paths = []
    for index in range(5):
        paths.append(tmp_path / f"photo{index}.png")
        Image.new("RGB", (32, 24), (index, 0, 0)).save(paths[-1])
    scorer = capeval.ViLBERTScore(model=str(model_folder), device="cpu", regions=RecordingExtractor(), chunk_size=3)
    result = scorer.score(paths, ["a dog"] * 5, [["a cat"]] * 5)
    assert calls == [([0, 1, 2], True), ([3, 4], True)]
    expected = capeval.ViLBERTScore(model=str(model_folder), device="cpu").score(
        [regions[index % 2] for index in range(5)], ["a dog"] * 5, [["a cat"]] * 5)
    assert result["vilbert_f1s"] == expected["vilbert_f1s"]


def test_images_use_the_regions_hook(model_folder, regions):
    calls = []

    def extractor(image):
        calls.append(image)
        return regions[0]

    hooked = capeval.ViLBERTScore(model=str(model_folder), device="cpu", regions=extractor)
    result = hooked.score(["photo.jpg", regions[0]], ["a dog", "a dog"], [["a cat"], ["a cat"]])
    assert calls == ["photo.jpg"]  # RegionFeatures entries never reach the extractor
    assert result["vilbert_f1s"][0] == result["vilbert_f1s"][1]


def test_a_regions_option_of_another_kind_is_refused(model_folder):
    with pytest.raises(InputError, match=r"^regions must be None \(ViLBERT's detector\), the hub id or folder of a "
                                         r"detector, a RegionExtractor or a function from an image entry to "
                                         r"RegionFeatures; got int 100$"):
        capeval.ViLBERTScore(model=str(model_folder), device="cpu", regions=100)


def test_bad_input_names_the_item(scorer, regions):
    good = regions[0]
    cases = [
        (RegionFeatures(good.features[:, :15], good.boxes, good.image_size), r"images\[0\]\.features has 15 columns"),
        (RegionFeatures(good.features[:50], good.boxes[:50], good.image_size), r"images\[0\]\.features has 50 regions"),
        (RegionFeatures(good.features, good.boxes + 1000, good.image_size), r"images\[0\]\.boxes\[0\].*outside"),
        (RegionFeatures(good.features), r"images\[0\]: this metric needs the region boxes and the image size"),
    ]
    for entry, message in cases:
        with pytest.raises(InputError, match=message):
            scorer.score([entry], ["a dog"], [["a dog"]])
    with pytest.raises(InputError, match="needs references"):
        scorer.score([good], ["a dog"])
    with pytest.raises(InputError, match=r"references\[0\] is empty"):
        scorer.score([good], ["a dog"], [[]])
    with pytest.raises(InputError, match=r"candidates\[0\] is empty"):
        scorer.score([good], ["  "], [["a dog"]])
    with pytest.raises(InputError, match=r"references\[0\]\[1\] is empty"):
        scorer.score([good], ["a dog"], [["a dog", ""]])


def write_region_file(path: Path, table: Dict[str, RegionFeatures]) -> None:
    """An .npz keyed by image id, each entry a 0-d record with features, boxes and image_size."""
    records = {}
    for key, entry in table.items():
        record = np.zeros((), dtype=[("features", np.float32, entry.features.shape),
                                     ("boxes", np.float32, entry.boxes.shape), ("image_size", np.float64, (2,))])
        record["features"], record["boxes"], record["image_size"] = entry.features, entry.boxes, entry.image_size
        records[key] = record
    np.savez(path, **records)


def test_command_line_reads_a_region_file(model_folder, items, regions, scorer, tmp_path, monkeypatch):
    """The command scores as the scorer, with the API's signature though its model folder is given relative to the
    working directory."""
    from capeval.cli import main

    keys = ["img2", "img3", "img8"]
    chosen = {"img2": 2, "img3": 3, "img8": 8}
    write_region_file(tmp_path / "regions.npz", {key: regions[index] for key, index in chosen.items()})
    (tmp_path / "candidates.json").write_text(json.dumps({key: items[i]["candidate"] for key, i in chosen.items()}))
    (tmp_path / "references.json").write_text(json.dumps({key: items[i]["references"] for key, i in chosen.items()}))
    monkeypatch.chdir(model_folder.parent)
    assert main(["score", "--metric", "vilbertscore", "--regions", str(tmp_path / "regions.npz"),
                 "--candidates", str(tmp_path / "candidates.json"), "--references", str(tmp_path / "references.json"),
                 "--model", model_folder.name, "--device", "cpu", "--output", str(tmp_path / "scores.json")]) == 0
    written = json.loads((tmp_path / "scores.json").read_text())
    expected = scorer.score([regions[chosen[key]] for key in keys], [items[chosen[key]]["candidate"] for key in keys],
                            [items[chosen[key]]["references"] for key in keys])
    assert written["signature"] == expected["signature"]
    assert written["signature"].startswith(f"vilbert_f1|model:{model_folder.resolve()}|")
    assert [written["scores"][key]["vilbert_f1"] for key in keys] == pytest.approx(expected["vilbert_f1s"], abs=1e-7)


def test_benchmark_metrics_read_regions_by_image_name(model_folder, items, regions, scorer, tmp_path):
    from capeval.benchmarks.runner import builtin_metrics

    write_region_file(tmp_path / "regions.npz", {"1000.jpg": regions[4], "2000": regions[9]})
    metrics = builtin_metrics(["vilbert_p", "vilbert_f"], model=str(model_folder), device="cpu",
                              regions=tmp_path / "regions.npz")
    assert not metrics["vilbert_f"].needs_images and metrics["vilbert_p"].scorer is metrics["vilbert_f"].scorer
    candidates = [items[4]["candidate"], items[9]["candidate"]]
    references = [items[4]["references"], items[9]["references"]]
    expected = scorer.score([regions[4], regions[9]], candidates, references)
    assert metrics["vilbert_f"](["1000.jpg", "2000.jpg"], candidates, references) == pytest.approx(
        expected["vilbert_f1s"], abs=1e-7)
    with pytest.raises(InputError, match=r"images\[1\]: no regions for image '3000.jpg'"):
        metrics["vilbert_p"](["1000.jpg", "3000.jpg"], candidates, references)


def test_evaluate_module_and_space_equal_the_scorer(model_folder, items, regions, scorer, tmp_path):
    import importlib.util

    import evaluate

    metrics_dir = REPO_ROOT / "metrics" / "vilbertscore"
    module = evaluate.load(str(metrics_dir))
    candidates = [items[0]["candidate"], items[7]["candidate"]]
    references = [items[0]["references"], items[7]["references"]]
    result = module.compute(predictions=candidates, references=references, images=[regions[0], regions[7]],
                            model=str(model_folder), device="cpu")
    expected = scorer.score([regions[0], regions[7]], candidates, references)
    assert result["vilbert_f1s"] == pytest.approx(expected["vilbert_f1s"], abs=1e-7)
    assert sorted(result) == RESULT_KEYS

    spec = importlib.util.spec_from_file_location("vilbertscore_space_app", metrics_dir / "app.py")
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    np.savez(tmp_path / "one.npz", features=regions[7].features, boxes=regions[7].boxes,
             image_size=np.array(regions[7].image_size))
    single = app.score_caption(str(tmp_path / "one.npz"), candidates[1], "\n".join(references[1]) + "\n\n",
                               model=str(model_folder))
    assert single["vilbert_f1"] == pytest.approx(expected["vilbert_f1s"][1], abs=1e-7)


def distinct_pairs(regions: List[RegionFeatures], candidates: List[str], references: List[List[str]]) -> int:
    """(image regions, text) pairs that need text states, each counted once."""
    return len({(entry.content_key(), text) for entry, candidate, refs in zip(regions, candidates, references)
                for text in (candidate, *refs)})


def test_disk_cache_gives_bit_identical_scores_and_a_warm_run_encodes_nothing(model_folder, items, regions, tmp_path):
    candidates, references = [item["candidate"] for item in items], [item["references"] for item in items]
    uncached = capeval.ViLBERTScore(model=str(model_folder), device="cpu", batch_size=4).score(
        regions, candidates, references)
    cold = capeval.ViLBERTScore(model=str(model_folder), device="cpu", batch_size=4, cache_dir=tmp_path)
    assert cold.score(regions, candidates, references) == uncached
    assert cold.engine.encoded == {"vilbert_text": distinct_pairs(regions, candidates, references)}
    warm = capeval.ViLBERTScore(model=str(model_folder), device="cpu", batch_size=4, cache_dir=tmp_path)
    assert warm.score(regions, candidates, references) == uncached
    assert warm.engine.encoded == {"vilbert_text": 0}
    # a candidate sweep over the same references: only the new candidates are encoded
    sweep = warm.score(regions, [f"{candidate} again" for candidate in candidates], references)
    assert warm.engine.encoded == {"vilbert_text": len(items)}
    assert sweep["vilbert_f1s"] != uncached["vilbert_f1s"]


def test_duplicates_are_encoded_once_and_score_as_alone(model_folder, items, regions):
    candidates, references = [item["candidate"] for item in items], [item["references"] for item in items]
    alone = capeval.ViLBERTScore(model=str(model_folder), device="cpu", batch_size=4).score(
        regions, candidates, references)
    order = list(range(len(items))) + [3, 0, 3, 9]
    # the repeated regions are copies: equal content shares rows whatever object holds it
    copies = [RegionFeatures(regions[i].features.copy(), regions[i].boxes.copy(), regions[i].image_size)
              for i in order[len(items):]]
    repeated = capeval.ViLBERTScore(model=str(model_folder), device="cpu", batch_size=4)
    result = repeated.score([*regions, *copies], [candidates[i] for i in order], [references[i] for i in order])
    assert repeated.engine.encoded == {"vilbert_text": distinct_pairs(regions, candidates, references)}
    for name in ("vilbert_precisions", "vilbert_recalls", "vilbert_f1s"):
        assert result[name] == [alone[name][i] for i in order]


def test_cached_rows_are_keyed_by_region_content_and_text(model_folder, items, regions, tmp_path):
    candidates, references = [item["candidate"] for item in items[:3]], [item["references"] for item in items[:3]]
    capeval.ViLBERTScore(model=str(model_folder), device="cpu", cache_dir=tmp_path).score(
        regions[:3], candidates, references)
    good = regions[1]
    moved_box = good.boxes.copy()
    moved_box[7, 2] -= 1.0
    features = good.features.copy()
    features[5, 3] += 1e-3
    for changed in (RegionFeatures(features, good.boxes, good.image_size),
                    RegionFeatures(good.features, moved_box, good.image_size),
                    RegionFeatures(good.features, good.boxes, (good.image_size[0] + 1, good.image_size[1]))):
        again = capeval.ViLBERTScore(model=str(model_folder), device="cpu", cache_dir=tmp_path)
        again.score([regions[0], changed, regions[2]], candidates, references)
        assert again.engine.encoded == {"vilbert_text": 1 + len(references[1])}  # only the changed image's texts
    again = capeval.ViLBERTScore(model=str(model_folder), device="cpu", cache_dir=tmp_path)
    again.score(regions[:3], [candidates[0], candidates[1] + ".", candidates[2]], references)
    assert again.engine.encoded == {"vilbert_text": 1}


@pytest.mark.parametrize("setting", [{"layer": -2}, {"task_id": 3}, {"precision": "bf16"}, "STATES_VERSION",
                                     "model"])
def test_disk_cache_never_serves_rows_of_other_settings(model_folder, items, regions, tmp_path, monkeypatch, setting):
    inputs = (regions[:2], [item["candidate"] for item in items[:2]], [item["references"] for item in items[:2]])
    pairs = distinct_pairs(*inputs)
    capeval.ViLBERTScore(model=str(model_folder), device="cpu", cache_dir=tmp_path / "cache").score(*inputs)
    options = {"model": str(model_folder), "device": "cpu", "cache_dir": tmp_path / "cache"}
    if setting == "STATES_VERSION":
        monkeypatch.setattr("capeval.models.vilbert.encoders.STATES_VERSION", "changed")
    elif setting == "model":
        changed = tmp_path / "changed"
        shutil.copytree(model_folder, changed)
        (changed / CHECKSUMS_NAME).unlink()  # weights changed by other code than capeval's converter
        weights = load_file(changed / "model.safetensors")
        name = next(key for key in weights if key.endswith("embeddings.word_embeddings.weight"))
        weights[name] = weights[name] * 1.5
        save_file(weights, changed / "model.safetensors", metadata={"format": "pt"})
        options["model"] = str(changed)
    else:
        options.update(setting)
    other = capeval.ViLBERTScore(**options)
    other.score(*inputs)
    assert other.engine.encoded == {"vilbert_text": pairs}


def test_command_line_and_evaluate_module_pass_the_cache_folder(model_folder, items, regions, scorer, tmp_path,
                                                                monkeypatch):
    import evaluate

    from capeval.cli import main
    from capeval.models.vilbert.encoders import TextStates

    chosen = {"img2": 2, "img8": 8}
    write_region_file(tmp_path / "regions.npz", {key: regions[index] for key, index in chosen.items()})
    (tmp_path / "candidates.json").write_text(json.dumps({key: items[i]["candidate"] for key, i in chosen.items()}))
    (tmp_path / "references.json").write_text(json.dumps({key: items[i]["references"] for key, i in chosen.items()}))
    command = ["score", "--metric", "vilbertscore", "--regions", str(tmp_path / "regions.npz"),
               "--candidates", str(tmp_path / "candidates.json"), "--references", str(tmp_path / "references.json"),
               "--model", str(model_folder), "--device", "cpu", "--cache-dir", str(tmp_path / "cache")]
    assert main([*command, "--output", str(tmp_path / "cold.json")]) == 0

    def no_encoding(self, batch):
        raise AssertionError("a warm run encodes no text states")

    with monkeypatch.context() as patch:
        patch.setattr(TextStates, "_states", no_encoding)
        assert main([*command, "--output", str(tmp_path / "warm.json")]) == 0
    assert json.loads((tmp_path / "warm.json").read_text()) == json.loads((tmp_path / "cold.json").read_text())

    module = evaluate.load(str(REPO_ROOT / "metrics" / "vilbertscore"))
    inputs = ([regions[0], regions[7]], [items[0]["candidate"], items[7]["candidate"]],
              [items[0]["references"], items[7]["references"]])
    result = module.compute(predictions=inputs[1], references=inputs[2], images=inputs[0], model=str(model_folder),
                            device="cpu", cache_dir=str(tmp_path / "module-cache"))
    fresh = capeval.ViLBERTScore(model=str(model_folder), device="cpu", cache_dir=tmp_path / "module-cache")
    assert fresh.score(*inputs)["vilbert_f1s"] == result["vilbert_f1s"]
    assert fresh.engine.encoded == {"vilbert_text": 0}


DISTRIBUTED_SCRIPT = """
import json, sys
sys.path[:0] = [sys.argv[4], sys.argv[4] + "/tests"]  # the repository (conversion/) and its tests
from capeval import ViLBERTScore
from fixtures.vilbert_checkpoints import load_items, load_regions
model, out = sys.argv[1], sys.argv[2]
items, regions = load_items(), load_regions()
scorer = ViLBERTScore(model=model, device="cpu", batch_size=4, cache_dir=sys.argv[3])
result = scorer.score(regions, [i["candidate"] for i in items], [i["references"] for i in items])
result["encoded"] = scorer.engine.encoded["vilbert_text"]
assert scorer.engine.state.num_processes == 2
json.dump(result, open(f"{out}/rank{scorer.engine.state.process_index}.json", "w"))
scorer.engine.state.destroy_process_group()
"""


def test_two_processes_equal_one_and_fill_the_cache_together(model_folder, items, regions, tmp_path):
    import os
    import subprocess
    import sys

    import torch

    script = tmp_path / "score.py"
    script.write_text(DISTRIBUTED_SCRIPT)
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port",
               "29518", str(script), str(model_folder), str(tmp_path), str(tmp_path / "cache"),
               str(REPO_ROOT)]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=600,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert completed.returncode == 0, completed.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    candidates, references = [item["candidate"] for item in items], [item["references"] for item in items]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        single = capeval.ViLBERTScore(model=str(model_folder), device="cpu", batch_size=4).score(
            regions, candidates, references)
        warm = capeval.ViLBERTScore(model=str(model_folder), device="cpu", batch_size=4, cache_dir=tmp_path / "cache")
        from_cache = warm.score(regions, candidates, references)
    finally:
        torch.set_num_threads(threads)
    encoded = [rank.pop("encoded") for rank in ranks]
    assert ranks == [single, single]
    assert all(0 < count for count in encoded) and sum(encoded) == distinct_pairs(regions, candidates, references)
    assert from_cache == single and warm.engine.encoded == {"vilbert_text": 0}  # each process stored its share


def test_warm_scoring_of_precomputed_regions_never_loads_nor_imports_a_detector(model_folder, items, regions, scorer,
                                                                                 tmp_path):
    """In a fresh process, cold then warm (a new scorer on the filled cache folder): every way of loading a detector
    raises, no detector module is imported, the warm run computes nothing and both equal the in-process scores."""
    result = run_isolated(f"""
        import capeval
        from fixtures.vilbert_checkpoints import load_items, load_regions

        items, regions = load_items()[:4], load_regions()[:4]
        inputs = (regions, [item["candidate"] for item in items], [item["references"] for item in items])
        runs = []
        for _ in range(2):
            fresh = capeval.ViLBERTScore(model={str(model_folder)!r}, device="cpu", batch_size=4, num_regions=100,
                                         cache_dir={str(tmp_path)!r})
            runs.append((fresh.score(*inputs)["vilbert_f1s"], dict(fresh.engine.encoded)))
        result = {{"cold": runs[0][0], "warm": runs[1][0], "warm_encoded": runs[1][1]}}
    """)
    assert not DETECTOR_MODULES & set(result["modules"])
    assert result["warm_encoded"] == {"vilbert_text": 0}
    assert result["warm"] == result["cold"]
    expected = scorer.score(regions[:4], [item["candidate"] for item in items[:4]],
                            [item["references"] for item in items[:4]])
    np.testing.assert_allclose(result["warm"], expected["vilbert_f1s"], rtol=0, atol=1e-6)

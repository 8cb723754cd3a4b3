"""Region extraction through the embedding engine: batching by resized size, caches written before the engine, the
decoded-size check, and two processes equal to one."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
import torch
import yaml
from PIL import Image
from safetensors.torch import save_file

from capeval.cache import DiskCache
from capeval.inputs import InputError, validate_image
from capeval.models.regions import extraction
from capeval.models.regions.configuration import ExtractionSettings
from capeval.models.regions.extraction import DetectionRows, RegionExtractor, extract_to_file
from capeval.models.regions.modeling_bottom_up import BottomUpDetector, cell_anchors
from conversion.regions_converter import CELL_ANCHORS_KEY, bottom_up_config
from fixtures.paths import REPO_ROOT
from fixtures.regions_checkpoints import REGIONS_DATA, converted_detector, synthetic_reference_state_dict

SETTINGS = ExtractionSettings(min_boxes=1, max_boxes=5)
FIELDS = ("features", "boxes", "scores", "object_ids", "object_scores", "attribute_ids", "attribute_scores")


@pytest.fixture(scope="module")
def detector() -> BottomUpDetector:
    """The tiny bottom-up detector at a small input size (shorter side 64, longer at most 100), so tests run fast."""
    config = bottom_up_config(yaml.safe_load((REGIONS_DATA / "config.yaml").read_text()))
    config = dataclasses.replace(config, min_size_test=64, max_size_test=100)
    model = converted_detector(BottomUpDetector, synthetic_reference_state_dict({CELL_ANCHORS_KEY: cell_anchors(config)}),
                               config)
    model.fingerprint = "tiny-bottom-up"
    return model


def _images(shapes: List[tuple], seed: int = 5) -> List[Image.Image]:
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 255, (*shape, 3), dtype=np.uint8)) for shape in shapes]


def test_batches_hold_images_of_one_resized_size_in_arrival_order(detector: BottomUpDetector) -> None:
    # 32x40 -> 64x80 and 40x32 -> 80x64: a group becomes a batch when full, leftover groups come last
    items = {f"k{i}": validate_image(image, i)
             for i, image in enumerate(_images([(32, 40), (32, 40), (40, 32), (32, 40), (40, 32), (32, 40), (48, 20)]))}
    batches = DetectionRows(detector, SETTINGS, batch_size=2).plan(items)
    assert [[key for key, _ in batch] for batch in batches] == [["k0", "k1"], ["k2", "k4"], ["k3", "k5"], ["k6"]]
    assert [[size for _, (_, size) in batch] for batch in batches] == \
        [[(64, 80)] * 2, [(80, 64)] * 2, [(64, 80)] * 2, [(100, 42)]]


def _earlier_layout_row(detection) -> np.ndarray:
    """A row as the extractor stored it before it used the engine: K, D, width, height, boxes, features, then
    scores, object ids, object scores, attribute ids, attribute scores, all float32."""
    count, dim = detection.features.shape
    return np.concatenate([[count, dim, *detection.image_size], detection.boxes.ravel(), detection.features.ravel(),
                           detection.scores, detection.object_ids, detection.object_scores, detection.attribute_ids,
                           detection.attribute_scores]).astype(np.float32)


def test_caches_written_before_the_engine_are_served_until_the_version_changes(
        detector: BottomUpDetector, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    items = [validate_image(image, i) for i, image in enumerate(_images([(32, 40), (40, 32), (32, 40)]))]
    expected = RegionExtractor(detector, SETTINGS).detections(items)
    # the namespace the extractor used before: "regions-" + digest of fingerprint | version "1" | settings
    text = f"tiny-bottom-up|1|{SETTINGS.signature()}"
    namespace = "regions-" + hashlib.blake2b(text.encode(), digest_size=12).hexdigest()
    DiskCache(tmp_path, namespace).put_many({item.key: _earlier_layout_row(d) for item, d in zip(items, expected)})
    cached = RegionExtractor(detector, SETTINGS, cache_dir=tmp_path)
    assert cached.cache_namespace() == namespace
    served = cached.detections(items)
    assert cached.detected == 0
    for ours, theirs in zip(served, expected):
        assert ours.image_size == theirs.image_size
        for field in FIELDS:
            assert getattr(ours, field).dtype == getattr(theirs, field).dtype
            np.testing.assert_array_equal(getattr(ours, field), getattr(theirs, field))
    monkeypatch.setattr(extraction, "EXTRACTION_VERSION", "changed")
    bumped = RegionExtractor(detector, SETTINGS, cache_dir=tmp_path)
    assert bumped.cache_namespace() != namespace
    bumped.detections(items)
    assert bumped.detected == 3


def test_an_image_decoding_to_another_size_than_its_header_is_named(
        detector: BottomUpDetector, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(extraction, "header_size", lambda item: (20, 20) if item.index == 1 else (32, 40))
    with pytest.raises(InputError, match=r"images\[1\] .* decodes to another size than its header states"):
        RegionExtractor(detector, SETTINGS)(_images([(32, 40), (32, 40)]))


TWO_PROCESS_SCRIPT = """
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/tests"]
from capeval.models.regions.detectors import DETECTORS
from capeval.models.regions.configuration import ExtractionSettings
from capeval.models.regions.extraction import RegionExtractor, extract_to_file
images = json.loads(sys.argv[3])
extractor = RegionExtractor(DETECTORS["bottom-up"].load(sys.argv[2], device="cpu"),
                            ExtractionSettings(min_boxes=1, max_boxes=5), batch_size=2)
assert extractor.engine.state.num_processes == 2
total = extract_to_file(extractor, images, sys.argv[4])
rank = extractor.engine.state.process_index
json.dump({"detected": extractor.detected, "total": total}, open(f"{sys.argv[4]}.rank{rank}.json", "w"))
extractor.engine.state.destroy_process_group()
"""


def _stored(path: Path) -> Dict[str, np.ndarray]:
    with np.load(path) as data:
        return {key: data[key] for key in data.files}


def test_two_processes_write_the_file_of_one(detector: BottomUpDetector, tmp_path: Path) -> None:
    model_dir, folder = tmp_path / "model", tmp_path / "images"
    model_dir.mkdir()
    folder.mkdir()
    save_file({k: v.contiguous() for k, v in detector.state_dict().items()}, str(model_dir / "model.safetensors"))
    detector.config.save(model_dir)
    images: Dict[str, str] = {}
    for index, image in enumerate(_images([(32, 40), (40, 32), (32, 40), (24, 48), (40, 32), (32, 40)], seed=7)):
        images[f"i{index}"] = str(folder / f"i{index}.png")
        image.save(images[f"i{index}"])
    images["copy"] = str(folder / "copy.png")  # the content of i0 under another id: detected once
    Image.open(images["i0"]).save(images["copy"])
    script = tmp_path / "extract.py"
    script.write_text(TWO_PROCESS_SCRIPT)
    out = tmp_path / "two.npz"
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port",
               "29541", str(script), str(REPO_ROOT), str(model_dir), json.dumps(images),
               str(out)]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=600,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert completed.returncode == 0, completed.stderr[-3000:]
    ranks = [json.loads(Path(f"{out}.rank{rank}.json").read_text()) for rank in range(2)]
    assert all(0 < rank["detected"] < 6 for rank in ranks)  # each process ran its share of the 6 distinct images
    assert sum(rank["detected"] for rank in ranks) == 6 and all(rank["total"] == 6 for rank in ranks)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each launched process (OMP_NUM_THREADS=1), so sums run in the same order
    try:
        single = RegionExtractor(detector, SETTINGS, batch_size=2)
        assert extract_to_file(single, {key: Path(path) for key, path in images.items()}, tmp_path / "one.npz") == 6
    finally:
        torch.set_num_threads(threads)
    two, one = _stored(out), _stored(tmp_path / "one.npz")
    assert sorted(two) == sorted(one) == sorted(images)
    for key in one:
        assert two[key].dtype == one[key].dtype and two[key].tobytes() == one[key].tobytes()
    assert not Path(f"{out}.parts").exists()

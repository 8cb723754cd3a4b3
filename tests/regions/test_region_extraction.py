"""Region extraction through the embedding engine: batching by resized size, caches written before the engine, the
decoded-size check, two processes equal to one, and the bottom-up rule's regions where the RPN proposes few."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from capeval.cache import DiskCache
from capeval.inputs import InputError, validate_image
from capeval.models.regions import extraction, preprocessing
from capeval.models.regions.configuration import ExtractionSettings, X152FpnConfig
from capeval.models.regions.detectors import DETECTORS
from capeval.models.regions.extraction import DetectionRows, RegionExtractor, extract_to_file, next_chunk_size
from capeval.models.regions.modeling_bottom_up import BottomUpDetector
from capeval.models.regions.preprocessing import network_size
from capeval.models.regions.proposals import propose_boxes
from fixtures.paths import REPO_ROOT
from fixtures.regions_checkpoints import small_input_bottom_up_detector

SETTINGS = ExtractionSettings(min_boxes=1, max_boxes=5)
FIELDS = ("features", "boxes", "scores", "object_ids", "object_scores", "attribute_ids", "attribute_scores")


@pytest.fixture(scope="module")
def detector() -> BottomUpDetector:
    """The tiny bottom-up detector at a small input size (shorter side 64, longer at most 100), so tests run fast."""
    model = small_input_bottom_up_detector()
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
    # the namespace the extractor used before: "regions-" + digest of fingerprint | version | settings (version 3
    # since 16-bit and CMYK JPEG images are read as OpenCV reads them)
    text = f"tiny-bottom-up|3|{SETTINGS.signature()}"
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
    monkeypatch.setattr(preprocessing, "header_size", lambda item: (20, 20) if item.index == 1 else (32, 40))
    with pytest.raises(InputError, match=r"images\[1\] .* decodes to another size than its header states"):
        RegionExtractor(detector, SETTINGS)(_images([(32, 40), (32, 40)]))


def test_shapes_the_detector_cannot_take_are_named_before_any_detection(
        detector: BottomUpDetector, monkeypatch: pytest.MonkeyPatch) -> None:
    # shorter side to 64, longer at most 100: 1 x 199 resizes to 1 x 100, 1 x 200 to 0 x 100 (half rounds to even)
    extractor = RegionExtractor(detector, SETTINGS)
    for shapes, index, size, resized in ((((32, 40), (1, 199), (1, 200)), 2, "200x1", "100x0"),
                                         (((250, 1), (32, 40)), 0, "1x250", "0x100")):
        with pytest.raises(InputError, match=rf"images\[{index}\] \(PIL RGB {size}\) is {size} pixels: resized for the "
                                             r"detector \(shorter side to 64, longer side at most 100\) it would be "
                                             rf"{resized}; the detector takes images whose longer side is less than "
                                             "200 times the shorter"):
            extractor(_images(list(shapes)))
    assert extractor.detected == 0
    assert len(extractor([_images([(1, 199)])[0]])[0].boxes) >= 1
    lxmert = replace(SETTINGS, preprocessing="lxmert")  # rounds half up: 1 x 200 is 1 x 100, 1 x 201 is 0 x 100
    assert network_size(validate_image(_images([(1, 200)])[0], 0), detector.config, "lxmert") == (1, 100)
    with pytest.raises(InputError, match=r"images\[0\] .* it would be 100x0"):
        RegionExtractor(detector, lxmert)(_images([(1, 201)]))
    fpn = X152FpnConfig()  # the FPN detector's 800 / 1333: 1 x 2665 is 1 x 1333, 1 x 2666 is refused
    assert network_size(validate_image(Image.new("RGB", (2665, 1)), 0), fpn, "caffe") == (1, 1333)
    with pytest.raises(InputError, match="longer side at most 1333.* less than 2666 times the shorter"):
        network_size(validate_image(Image.new("RGB", (2666, 1)), 0), fpn, "caffe")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # absurdly large images are refused when validated
    with pytest.raises(InputError, match=r"images\[1\]: 40x32 exceeds PIL.Image.MAX_IMAGE_PIXELS"):
        extractor(_images([(1, 100), (32, 40)]))


class FakeClock:
    """A clock that advances ``step`` seconds each time it is read."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_progress_is_saved_by_time_as_well_as_by_count(detector: BottomUpDetector, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "images"
    folder.mkdir()
    paths = {}
    for index, image in enumerate(_images([(32, 40)] * 7, seed=3)):
        paths[f"i{index}"] = folder / f"i{index}.png"
        image.save(paths[f"i{index}"])
    extractor = RegionExtractor(detector, SETTINGS, batch_size=2)
    chunks: List[int] = []
    interrupt_at = [4]
    detections = extractor.detections

    def interrupted(items):
        chunks.append(len(items))
        if len(chunks) == interrupt_at[0]:
            raise KeyboardInterrupt
        return detections(items)

    monkeypatch.setattr(extractor, "detections", interrupted)
    out = tmp_path / "regions.npz"
    # a chunk reads the clock before and after: 100 s. The first chunk (one batch) is 2 images at 50 s each, so the
    # next hold the 1 image that 60 s allow; the fourth chunk is interrupted, the three before it are saved
    with pytest.raises(KeyboardInterrupt):
        extract_to_file(extractor, paths, out, chunk_size=64, save_seconds=60, clock=FakeClock(100))
    assert chunks == [2, 1, 1, 1]
    assert sorted(part.stem for part in Path(f"{out}.parts").glob("*.npy")) == ["i0", "i1", "i2", "i3"]
    chunks.clear()
    interrupt_at[0] = 0
    # a fast detector: after the first batch, the rest in one chunk (64 at most)
    assert extract_to_file(extractor, paths, out, chunk_size=64, save_seconds=60, clock=FakeClock(0.0)) == 3
    assert chunks == [2, 1]
    uninterrupted = tmp_path / "uninterrupted.npz"
    assert extract_to_file(RegionExtractor(detector, SETTINGS, batch_size=2), paths, uninterrupted) == 7
    resumed, whole = _stored(out), _stored(uninterrupted)
    assert sorted(resumed) == sorted(whole) == sorted(paths)
    for key in whole:  # batched otherwise: equal up to float32 rounding
        for field in FIELDS:
            np.testing.assert_allclose(resumed[key][field], whole[key][field], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("seconds_per_image", "expected"), [(0.0, 64), (0.5, 64), (1.0, 60), (7.0, 8), (61.0, 1)])
def test_next_chunk_size(seconds_per_image: float, expected: int) -> None:
    assert next_chunk_size(seconds_per_image, 64, 60.0) == expected


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
        # the detector as the processes load it, so that the files record the same source
        single = RegionExtractor(DETECTORS["bottom-up"].load(model_dir), SETTINGS, batch_size=2)
        assert extract_to_file(single, {key: Path(path) for key, path in images.items()}, tmp_path / "one.npz") == 6
    finally:
        torch.set_num_threads(threads)
    two, one = _stored(out), _stored(tmp_path / "one.npz")
    assert sorted(two) == sorted(one) == sorted(images)
    for key in one:
        assert two[key].dtype == one[key].dtype and two[key].tobytes() == one[key].tobytes()
    assert not Path(f"{out}.parts").exists()


def test_proposals_suppressed_by_nms_fill_up_to_min_kept_highest_first() -> None:
    # boxes 0-4 overlap almost entirely, box 5 stands apart: NMS keeps 0 and 5 of the 6
    anchors = torch.tensor([[0, 0, 10, 10], [0.1, 0, 10.1, 10], [0.2, 0, 10.2, 10], [0.3, 0, 10.3, 10],
                            [0.4, 0, 10.4, 10], [20, 20, 30, 30]], dtype=torch.float32)
    scores = torch.tensor([0.9, 0.6, 0.8, 0.5, 0.7, 0.85])

    def proposed(post_nms_topk: int, min_kept: int) -> List[float]:
        _, kept = propose_boxes(scores, torch.zeros(6, 4), anchors, 40, 40, pre_nms_topk=6000,
                                post_nms_topk=post_nms_topk, nms_threshold=0.7, min_size=0.0,
                                box_weights=(1.0, 1.0, 1.0, 1.0), min_kept=min_kept)
        return [round(float(score), 2) for score in kept]

    assert proposed(300, 0) == proposed(300, 2) == [0.9, 0.85]  # the RPN as published
    assert proposed(300, 4) == [0.9, 0.85, 0.8, 0.7]
    assert proposed(300, 36) == [0.9, 0.85, 0.8, 0.7, 0.6, 0.5]  # every box there is
    assert proposed(3, 36) == [0.9, 0.85, 0.8]  # never beyond post_nms_topk


def test_every_image_gets_36_regions_where_the_rpn_proposes_fewer(
        detector: BottomUpDetector, capeval_test_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """generate_tsv.py's rule with MIN_BOXES = MAX_BOXES = 36 keeps fewer regions when the RPN proposes fewer than 36
    boxes: with the small-input detector, the CLIPScore example image1.jpg (20) and 3 of the first 10 Flickr8k images
    (15 of the first 60). The RPN then keeps the boxes its NMS suppressed, after those it kept, and every image gets
    36 regions."""
    paths = [capeval_test_data / "examples" / "clipscore" / "images" / "image1.jpg",
             *sorted((capeval_test_data / "flickr8k" / "images_original").glob("*.jpg"))[:10]]
    propose = BottomUpDetector.propose
    proposals: List[tuple] = []  # (after NMS alone, as the detector proposes them), image by image

    def recorded(self, logits, deltas, anchors, height, width, min_proposals=0):  # type: ignore[no-untyped-def]
        proposals.append((propose(self, logits, deltas, anchors, height, width),
                          propose(self, logits, deltas, anchors, height, width, min_proposals)))
        return proposals[-1][1]

    monkeypatch.setattr(BottomUpDetector, "propose", recorded)
    settings = DETECTORS["bottom-up"].settings
    assert (settings.min_boxes, settings.max_boxes, settings.min_proposals) == (36, 36, 36)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = RegionExtractor(detector, settings, batch_size=1).detections(
            [validate_image(path, index) for index, path in enumerate(paths)])
    assert not [warning for warning in caught if "regions" in str(warning.message)]
    assert [result.features.shape for result in results] == [(36, detector.config.pooled_feature_dim)] * len(paths)
    after_nms = [len(nms_kept) for nms_kept, _ in proposals]
    assert after_nms == [20, 38, 39, 36, 35, 35, 39, 42, 35, 38, 39]
    for nms_kept, kept in proposals:
        assert len(kept) == max(len(nms_kept), 36) and torch.equal(kept[:len(nms_kept)], nms_kept)

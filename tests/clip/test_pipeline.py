"""The host pipeline: decoding in DataLoader worker processes, validation ahead in threads, images requested before
texts. Results equal in-process decoding for every input form; errors name the item and leave no worker behind."""
from __future__ import annotations

import io
import multiprocessing
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import List

import numpy as np
import pytest
import torch
from PIL import Image

from capeval import CLIPScore, InputError
from capeval.inputs import validate_image
from capeval.models.clip.encoders import DECODE_GROUP
from fixtures.paths import REPO_ROOT

CAPTIONS = ["a dog runs on grass", "two children play", "a man rides a bike", "a red car", "people at a market"]


@pytest.fixture(scope="module")
def files(capeval_test_data: Path) -> List[Path]:
    """Eight 224px Flickr8k images and two originals."""
    folder = capeval_test_data / "flickr8k"
    return sorted((folder / "images_224").glob("*.jpg"))[:8] + sorted((folder / "images_original").glob("*.jpg"))[:2]


def _inputs(files: List[Path]) -> list:
    """Every input form, with duplicates: paths, encoded bytes, PIL images, uint8 arrays, a path repeated."""
    pil = Image.open(files[2])
    pil.load()
    return [files[0], str(files[1]), files[0].read_bytes(), pil, np.asarray(Image.open(files[3]).convert("RGB")),
            files[4], files[5], files[6], files[7], files[8], files[9], files[1], files[0], pil]


def _child_pids() -> set:
    return {child.pid for child in multiprocessing.active_children()}


@pytest.mark.parametrize("batch_size", [3, 2 * DECODE_GROUP + 1])
def test_worker_processes_give_the_in_process_results_for_every_input_form(files, tiny_openai_clip,
                                                                           batch_size: int) -> None:
    images = _inputs(files)
    candidates = [CAPTIONS[i % len(CAPTIONS)] for i in range(len(images))]
    references = [[CAPTIONS[(i + 1) % 5], CAPTIONS[(i + 2) % 5]] for i in range(len(images))]
    in_process = CLIPScore(model=tiny_openai_clip.hf_dir, batch_size=batch_size, num_workers=0, chunk_size=5)
    expected = in_process.score(images, candidates, references)
    workers = CLIPScore(model=tiny_openai_clip.hf_dir, batch_size=batch_size, num_workers=2, chunk_size=5)
    assert workers.score(images, candidates, references) == expected
    streamed = CLIPScore(model=tiny_openai_clip.hf_dir, batch_size=batch_size, num_workers=2, chunk_size=5)
    assert streamed.score(iter(images), iter(candidates), (refs for refs in references)) == expected
    # 10 distinct contents (files[0]'s bytes share its key); repeats in later chunks come from the memory cache
    assert workers.engine.encoded["image"] == streamed.engine.encoded["image"] == 10
    # and the rows are those of the decoded batch run through the model directly (one batch: the whole request)
    one_batch = CLIPScore(model=tiny_openai_clip.hf_dir, batch_size=len(files), num_workers=2)
    rows = one_batch.engine.image_features([validate_image(path, index) for index, path in enumerate(files)])
    transform = one_batch.backbone.image_transform
    pixels = torch.stack([transform.to_uint8(Image.open(path), str(path)) for path in files])
    direct = one_batch.backbone.encode_images(pixels)
    np.testing.assert_array_equal(rows, direct.numpy())


def test_an_image_a_worker_cannot_decode_names_the_item_and_stops_the_workers(files, tiny_openai_clip) -> None:
    data = files[0].read_bytes()
    truncated = data[: len(data) // 3]  # the header parses, the pixels do not decode
    with Image.open(io.BytesIO(truncated)) as image:
        assert image.size == Image.open(files[0]).size
    before = _child_pids()
    scorer = CLIPScore(model=tiny_openai_clip.hf_dir, batch_size=2, num_workers=2)
    images = [files[1], files[2], files[3], files[4], files[5], truncated, files[6]]
    with pytest.raises(InputError, match=r"images\[5\] \(\d+ bytes\) could not be decoded"):
        scorer.score(images, CAPTIONS + CAPTIONS[:2])
    assert _child_pids() <= before
    # the scorer still works afterwards (new workers), with the same rows as before
    again = scorer.score(images[:5], CAPTIONS)
    assert again == CLIPScore(model=tiny_openai_clip.hf_dir, batch_size=2, num_workers=0).score(images[:5], CAPTIONS)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_an_image_whose_resize_exceeds_the_pixel_limit_is_named(files, tiny_openai_clip, num_workers: int,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # the shorter side goes to 224: 19 x 1 becomes 4256 x 224 (953,344 pixels), 30 x 1 becomes 6720 x 224
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1_000_000)
    scorer = CLIPScore(model=tiny_openai_clip.hf_dir, batch_size=2, num_workers=num_workers)
    assert len(scorer.score([files[0], Image.new("RGB", (19, 1))], CAPTIONS[:2])["clip_scores"]) == 2
    with pytest.raises(InputError, match=r"images\[1\] \(PIL RGB 1x30\) is 1x30 pixels: CLIP's transform resizes its "
                                         r"shorter side to 224 pixels, which makes it 224x6,720 \(1,505,280 pixels\) "
                                         r"before the centre crop, more than PIL.Image.MAX_IMAGE_PIXELS \(1,000,000\); "
                                         "the longer side may be at most about 20 times the shorter"):
        scorer.score([files[0], Image.new("RGB", (1, 30))], CAPTIONS[:2])


INTERRUPTED_SCRIPT = textwrap.dedent("""
    import multiprocessing, sys
    import capeval.models.clip.loading as loading
    from capeval import CLIPScore

    model, tower, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    scorer = CLIPScore(model=model, batch_size=2, num_workers=2)
    name = f"encode_{tower}"
    forward = getattr(loading.Backbone, name)
    calls = []

    def interrupted(self, batch):
        calls.append(len(batch))
        if len(calls) == (2 if tower == "images" else 1):  # texts run while the images decode
            assert multiprocessing.active_children(), "decoding workers should be running"
            raise KeyboardInterrupt
        return forward(self, batch)

    setattr(loading.Backbone, name, interrupted)
    try:
        scorer.score(files, ["a caption"] * len(files))
    except KeyboardInterrupt:
        print("interrupted; workers left:", len(multiprocessing.active_children()))
""")


@pytest.mark.parametrize("tower", ["images", "texts"])
def test_keyboard_interrupt_leaves_no_worker_process(files, tiny_openai_clip, tmp_path, tower: str) -> None:
    script = tmp_path / "interrupted.py"
    script.write_text(INTERRUPTED_SCRIPT)
    completed = subprocess.run([sys.executable, str(script), str(tiny_openai_clip.hf_dir), tower, *map(str, files)],
                               capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "interrupted; workers left: 0" in completed.stdout


def test_validation_errors_keep_item_order_across_threads(files, tiny_openai_clip) -> None:
    scorer = CLIPScore(model=tiny_openai_clip.hf_dir, num_workers=0, chunk_size=4)
    images = [files[0], files[1], b"not an image", files[2], files[3], files[4]]
    captions = ["fine", "fine", "fine", "fine", "", "fine"]
    with pytest.raises(InputError, match=r"images\[2\]"):
        scorer.score(images, captions)
    captions[1] = " "
    with pytest.raises(InputError, match=r"candidates\[1\] is empty"):
        scorer.score(images, captions)


def test_starting_the_workers_passes_on_no_fork_with_threads_warning(files, tiny_openai_clip, monkeypatch) -> None:
    """Python 3.12+'s ``os.fork`` warns whenever the process has other threads (a scoring process always has); the
    warning is simulated here, so that the check runs on every Python."""
    import os
    import warnings

    fork = os.fork

    def warning_fork() -> int:
        warnings.warn(f"This process (pid={os.getpid()}) is multi-threaded, use of fork() may lead to deadlocks in "
                      "the child.", DeprecationWarning, stacklevel=2)
        return fork()

    monkeypatch.setattr(os, "fork", warning_fork)
    scorer = CLIPScore(model=tiny_openai_clip.hf_dir, num_workers=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = scorer.score(files[:4], CAPTIONS[:4])
    assert len(result["clip_scores"]) == 4
    assert [str(warning.message) for warning in caught if "fork" in str(warning.message)] == []

"""Image files checked in worker processes (``FileChecks``): the same keys, items and errors as the checks in this
process, errors in item order, and a file that changes after its validation refused where it is decoded."""
from __future__ import annotations

import hashlib
import multiprocessing
import re
import shutil
from pathlib import Path
from typing import Iterator, List

import pytest
from PIL import Image

from capeval import CLIPScore, InputError
from capeval.file_checks import FileChecks
from capeval.inputs import ImageItem, iter_scoring_items, validate_image


@pytest.fixture(scope="module")
def files(capeval_test_data: Path) -> List[Path]:
    """Six 224px Flickr8k images and two originals."""
    folder = capeval_test_data / "flickr8k"
    return sorted((folder / "images_224").glob("*.jpg"))[:6] + sorted((folder / "images_original").glob("*.jpg"))[:2]


@pytest.fixture(scope="module")
def checks() -> Iterator[FileChecks]:
    file_checks = FileChecks(2)
    yield file_checks
    file_checks.close()


def _content_key(path: Path) -> str:
    """What the keys of file contents have always been: BLAKE2b-128 of ``b"file"`` and the file's bytes."""
    return hashlib.blake2b(b"file" + path.read_bytes(), digest_size=16).hexdigest()


def test_keys_and_items_equal_the_checks_in_this_process(files, checks) -> None:
    images = [files[0], str(files[1]), *files[2:], files[1], files[0].read_bytes(), files[0]]
    (offloaded,) = iter_scoring_items(images, ["a caption"] * len(images), file_checks=checks)
    (in_process,) = iter_scoring_items(images, ["a caption"] * len(images))
    assert offloaded.images == in_process.images
    assert [item.key for item in offloaded.images] == [_content_key(Path(image)) for image in images[:-2]] + [
        _content_key(files[0])] * 2
    assert [item.index for item in offloaded.images] == list(range(len(images)))
    assert offloaded.images[1] == ImageItem(1, _content_key(files[1]), files[1], str(files[1]))
    assert offloaded.images[-2].data == files[0].read_bytes()  # bytes stay bytes
    assert validate_image(files[2], 7) == ImageItem(7, _content_key(files[2]), files[2], str(files[2]))


@pytest.mark.parametrize("chunk_size", [4, 100])
@pytest.mark.parametrize("offloaded", [True, False])
def test_errors_come_in_item_order_the_image_before_the_captions(files, checks, tmp_path, chunk_size: int,
                                                                 offloaded: bool) -> None:
    missing = tmp_path / "missing.jpg"
    garbage = tmp_path / "garbage.jpg"
    garbage.write_bytes(b"\xff\xd8\xff" + b"\x00" * 100)
    many = [*files, *files, *files, *files]  # later files go to later groups of the processes

    def first_error(images: list, candidates: List[str]) -> str:
        with pytest.raises(InputError) as error:
            for _ in iter_scoring_items(images, candidates, chunk_size=chunk_size,
                                        file_checks=checks if offloaded else None):
                pass
        return str(error.value)

    captions = ["a caption"] * (len(many) + 2)
    assert first_error([*many, missing, garbage], captions).startswith(f"images[{len(many)}]: file not found: ")
    assert first_error([*many, garbage, missing], captions).startswith(
        f"images[{len(many)}] ({garbage}) is not a readable image")
    # an earlier item's caption, or an earlier image given as bytes, comes before a later file's error
    assert first_error([*many, missing], [*captions[:5], " ", *captions[6:len(many) + 1]]) == (
        "candidates[5] is empty; every caption must contain text")
    assert first_error([files[0], b"not an image", missing], captions[:3]).startswith(
        "images[1] (12 bytes) is not a readable image")
    # an item's own image before its caption
    assert first_error([files[0], missing], ["a caption", ""]).startswith("images[1]: file not found: ")


def test_the_pixel_limit_of_the_moment_applies_in_the_processes(files, checks, monkeypatch) -> None:
    list(iter_scoring_items([files[6]], ["a"], file_checks=checks))  # the processes have started
    width, height = Image.open(files[6]).size
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", width * height // 2 - 1)
    with pytest.raises(InputError, match=rf"images\[0\] \({re.escape(str(files[6]))}\) is too large to decode safely"):
        list(iter_scoring_items([files[6]], ["a"], file_checks=checks))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_file_changed_after_its_validation_is_refused_where_it_is_decoded(files, tiny_openai_clip, tmp_path,
                                                                            num_workers: int) -> None:
    copies = [shutil.copyfile(path, tmp_path / f"{number}.jpg") for number, path in enumerate(files[:3])]
    scorer = CLIPScore(model=tiny_openai_clip.hf_dir, num_workers=num_workers)
    (chunk,) = iter_scoring_items(copies, ["a", "b", "c"], file_checks=scorer.file_checks)
    shutil.copyfile(files[4], copies[1])  # another image under the same name
    changed = rf"images\[1\] \({re.escape(str(copies[1]))}\) changed after it was validated"
    with pytest.raises(InputError, match=changed):
        scorer.engine.image_features(chunk.images)
    with pytest.raises(InputError, match=changed):
        chunk.images[1].open()
    copies[1].unlink()
    with pytest.raises(InputError, match=rf"images\[1\]: file not found: {re.escape(str(copies[1]))}"):
        chunk.images[1].size()
    shutil.copyfile(files[1], copies[1])  # the content that was validated: accepted again
    assert chunk.images[1].size() == Image.open(files[1]).size
    assert scorer.engine.image_features(chunk.images).shape[0] == 3


def test_scorers_check_files_in_processes_when_they_decode_in_processes(files, tiny_openai_clip) -> None:
    in_process = CLIPScore(model=tiny_openai_clip.hf_dir, num_workers=0)
    assert in_process.file_checks is None
    workers = CLIPScore(model=tiny_openai_clip.hf_dir, num_workers=2)
    assert workers.file_checks is not None and workers.file_checks.processes == 1
    captions = ["a dog", "a cat", "two people", "a red car", "a market", "a street", "a beach", "a bike"]
    assert workers.score(files, captions) == in_process.score(files, captions)
    before = {child.pid for child in multiprocessing.active_children()}
    with pytest.raises(InputError, match=r"images\[1\]: file not found"):
        workers.score([files[0], files[0].with_name("absent.jpg")], captions[:2])
    # the file checks stopped with the failed call (the decoding workers, never reached, persist)
    assert {child.pid for child in multiprocessing.active_children()} < before
    assert workers.score(files, captions) == in_process.score(files, captions)  # new ones afterwards


def test_a_daemonic_process_checks_files_in_its_own_threads(files, tiny_openai_clip, monkeypatch) -> None:
    paths = [str(path) for path in files[:3]]
    expected = CLIPScore(model=tiny_openai_clip.hf_dir, num_workers=0).score(paths, ["a dog"] * 3)
    monkeypatch.setattr(multiprocessing.current_process(), "daemon", True)  # what a daemonic process sees
    scorer = CLIPScore(model=tiny_openai_clip.hf_dir)
    assert scorer.file_checks is None and scorer.engine.num_workers == 0
    assert scorer.score(paths, ["a dog"] * 3) == expected


def test_bytes_of_a_file_and_its_path_share_one_key(files, checks) -> None:
    data = files[3].read_bytes()
    (chunk,) = iter_scoring_items([files[3], data, bytes(bytearray(data))], ["a", "b", "c"], file_checks=checks)
    assert len({item.key for item in chunk.images}) == 1
    assert chunk.images[1].data is chunk.images[2].data  # equal bytes: one copy
    assert chunk.images[0].data == files[3]

"""Bad input: every case gives a clear error naming the item, or the documented result."""
from __future__ import annotations

import io
import zlib
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Tuple

import numpy as np
import pytest
from PIL import Image

from capeval import CLIPScore, InputError
from capeval.hub import LoadedModels
from capeval.inputs import TruncationWarning, images_by_stem
from capeval.models.clip import loading


@dataclass(frozen=True)
class ExampleImage:
    """Stands for CLIPScore's example image ``number`` in test parameters (the files come from the test data)."""

    number: int


IMAGE_1, IMAGE_2 = ExampleImage(1), ExampleImage(2)


@pytest.fixture(scope="module")
def example_images(capeval_test_data: Path) -> Tuple[Path, Path]:
    """CLIPScore's two example images."""
    folder = capeval_test_data / "examples" / "clipscore" / "images"
    return folder / "image1.jpg", folder / "image2.jpg"


@pytest.fixture(scope="module")
def scorer(tiny_openai_clip) -> CLIPScore:
    return CLIPScore(model=tiny_openai_clip.hf_dir)


def _png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width x height`` (1-bit), with a tiny compressed body."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


@pytest.mark.parametrize(
    "images, candidates, references, message",
    [
        ([IMAGE_1, IMAGE_2], ["a cat"], None, "differ in length: 2 images, 1 candidates"),
        ([IMAGE_1], ["a cat"], [["x"], ["y"]], "differ in length: 1 images, 1 candidates, 2 references"),
        ([IMAGE_1, IMAGE_2], ["a cat", ""], None, r"candidates\[1\] is empty"),
        ([IMAGE_1, IMAGE_2], ["a cat", "   "], None, r"candidates\[1\] is empty"),
        ([IMAGE_1, IMAGE_2], ["a cat", "\u200b\u200d \ufeff"], None,
         r"candidates\[1\] is empty; every caption must contain text \(it holds only invisible characters"),
        ([IMAGE_1, IMAGE_2], ["a cat", "a d\udcffg"], None,
         r"candidates\[1\] is not valid Unicode: '\\udcff' at character 3 cannot be encoded as UTF-8"),
        ([IMAGE_1, IMAGE_2], ["a", "b"], [["r"], ["ok", "\u2060"]], r"references\[1\]\[1\] is empty"),
        ([IMAGE_1, IMAGE_2], [None, "a cat"], None, r"candidates\[0\] is None"),
        ([IMAGE_1, IMAGE_2], ["a cat", 7], None, r"candidates\[1\] has type int"),
        ([IMAGE_1], "a cat", None, r"^candidates must be a list of strings, got a single str \('a cat'\)"),
        ([IMAGE_1], b"a cat", None, "^candidates must be a list of strings, got a single bytes"),
        ("examples/clipscore/images", ["a", "b"], None, r"^images must be a list of images .*, got a single str"),
        (Path("examples/clipscore/images"), ["a", "b"], None,
         r"^images must be a list of images .*, got a single PosixPath"),
        (_png_header_only(4, 4), ["a"], None, r"^images must be a list of images .*, got a single bytes"),
        ([IMAGE_1], ["a"], "a ref", r"^references must be a list of lists of strings, got a single str"),
        ([IMAGE_1, IMAGE_2], ["a", "b"], [["r"], []], r"references\[1\] is empty"),
        ([IMAGE_1, IMAGE_2], ["a", "b"], [["r"], "r"], r"references\[1\] must be a list"),
        ([IMAGE_1, IMAGE_2], ["a", "b"], [["r"], ["ok", None]], r"references\[1\]\[1\] is None"),
        ([IMAGE_1, IMAGE_2], ["a", "b"], [["r"], ["ok", ""]], r"references\[1\]\[1\] is empty"),
        ([IMAGE_1, Path("/nonexistent/x.jpg")], ["a", "b"], None, r"images\[1\]: file not found: /nonexistent/x.jpg"),
        ([IMAGE_1, b"not an image"], ["a", "b"], None, r"images\[1\] .* is not a readable image"),
        ([np.zeros((4, 4), dtype=np.float32)], ["a"], None, r"images\[0\]: arrays must be uint8"),
        ([np.zeros((4, 4, 2), dtype=np.uint8)], ["a"], None, r"images\[0\]: expected an HW or HWC"),
        ([3.5], ["a"], None, r"images\[0\] has type float"),
        ([], [], None, "no items to score"),
    ],
)
def test_bad_input_names_the_item(scorer, request, images, candidates, references, message) -> None:
    if not isinstance(images, (str, bytes, Path)) and any(isinstance(image, ExampleImage) for image in images):
        # only these cases need the test data
        files = request.getfixturevalue("example_images")
        images = [files[image.number - 1] if isinstance(image, ExampleImage) else image for image in images]
    with pytest.raises(InputError, match=message):
        scorer.score(images, candidates, references)


def test_streamed_inputs_of_different_length_are_an_error(scorer, example_images) -> None:
    image_1, image_2 = example_images
    images = (p for p in [image_1, image_2, image_1])
    captions = (c for c in ["a", "b"])
    with pytest.raises(InputError, match="images ended after 2 items|candidates ended after 2 items"):
        scorer.score(images, captions)


def test_corrupt_image_file(scorer, example_images, tmp_path) -> None:
    image_1, image_2 = example_images
    truncated = tmp_path / "truncated.jpg"
    truncated.write_bytes(image_1.read_bytes()[:2000])
    with pytest.raises(InputError, match=r"images\[1\] \(.*truncated.jpg\) could not be decoded"):
        scorer.score([image_2, truncated], ["a", "b"])
    garbage = tmp_path / "garbage.jpg"
    garbage.write_bytes(b"\xff\xd8\xff" + b"\x00" * 100)
    with pytest.raises(InputError, match=r"images\[0\] .*garbage.jpg.* not a readable image"):
        scorer.score([garbage], ["a"])


def test_decompression_bomb_is_refused_before_decoding(scorer, example_images, tmp_path) -> None:
    image_1, image_2 = example_images
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(_png_header_only(40_000, 40_000))  # 1.6 gigapixels claimed in a few hundred bytes
    assert bomb.stat().st_size < 1000
    with pytest.raises(InputError, match=r"images\[1\] .*bomb.png.* too large"):
        scorer.score([image_1, bomb], ["a", "b"])
    with pytest.raises(InputError, match=r"images\[0\] .* too large"):
        scorer.score([bomb.read_bytes()], ["a"])


def test_image_between_pil_warning_and_error_limits_is_refused(scorer, example_images, monkeypatch) -> None:
    image_1, image_2 = example_images
    width, height = Image.open(image_1).size
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", width * height - 1)  # now above the warning limit only
    with pytest.raises(InputError, match=r"images\[0\] .* too large"):
        scorer.score([image_1], ["a"])
    with pytest.warns(Image.DecompressionBombWarning):
        opened = Image.open(image_1)  # PIL itself only warns at this size
    with pytest.raises(InputError, match=r"images\[0\]: .* exceeds PIL.Image.MAX_IMAGE_PIXELS"):
        scorer.score([opened], ["a"])


def test_long_captions_are_truncated_with_one_warning_and_a_count(scorer, example_images) -> None:
    image_1, image_2 = example_images
    long_caption = "a very long caption about a dog " * 20
    with pytest.warns(TruncationWarning, match="^3 texts exceed the model's 77-token context") as record:
        result = scorer.score([image_1, image_2], [long_caption, "short"], [[long_caption], ["ok", long_caption]])
    warned = [w.message for w in record if isinstance(w.message, TruncationWarning)]
    assert len(warned) == 1
    assert warned[0].positions == ((0, None), (0, 0), (1, 1))
    assert str(warned[0]).endswith(": candidates[0], references[0][0], references[1][1]")
    truncated_only = long_caption.split()[:60]  # well past 75 tokens once prompted: same tokens after truncation
    same = scorer.score([image_1], [" ".join(truncated_only) + " and more words"])
    assert result["clip_scores"][0] == same["clip_scores"][0]


def test_texts_read_from_the_disk_cache_are_still_counted_as_truncated(tiny_openai_clip, example_images,
                                                                       tmp_path, monkeypatch) -> None:
    image_1, _ = example_images
    long_caption = "a very long caption about a dog " * 20
    for texts_encoded in (2, 0):  # a later run on the same cache folder encodes (and tokenises) no text
        monkeypatch.setattr(loading, "_LOADED", LoadedModels())  # each run loads its own backbone, as a new process would
        scorer = CLIPScore(model=tiny_openai_clip.hf_dir, cache_dir=tmp_path)
        with pytest.warns(TruncationWarning) as record:
            scorer.score([image_1], [long_caption], [["short", long_caption]])
        warned = [w.message for w in record if isinstance(w.message, TruncationWarning)]
        assert [message.positions for message in warned] == [((0, None), (0, 1))]
        assert scorer.engine.encoded["text"] == texts_encoded


def test_nothing_is_dropped_and_order_is_kept(scorer, example_images) -> None:
    image_1, image_2 = example_images
    images = [image_1, image_2, image_1, image_2, image_1]
    captions = ["a cat", "a dog", "a dog", "a cat", "a cat"]
    result = scorer.score(images, captions)
    scores = result["clip_scores"]
    assert len(scores) == 5
    assert scores[0] == scores[4]  # same image and caption
    separately = [scorer.score([i], [c])["clip_scores"][0] for i, c in zip(images, captions)]
    np.testing.assert_allclose(scores, separately, atol=1e-7)


def test_rgba_bytes_and_pil_palette_inputs_are_accepted(scorer, example_images) -> None:
    image_1, image_2 = example_images
    buffer = io.BytesIO()
    Image.open(image_1).convert("RGBA").save(buffer, format="PNG")
    palette = Image.open(image_2).quantize(colors=16)
    result = scorer.score([buffer.getvalue(), palette], ["a cat", "a dog"])
    assert len(result["clip_scores"]) == 2 and all(np.isfinite(result["clip_scores"]))


def test_images_of_a_folder_by_stem(tmp_path: Path) -> None:
    for name in ("b.PNG", "a.jpg", "b.jpg", "notes.txt"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "folder.jpg").mkdir()
    assert images_by_stem(tmp_path) == {"a": [tmp_path / "a.jpg"], "b": [tmp_path / "b.PNG", tmp_path / "b.jpg"]}
    with pytest.raises(InputError, match="image folder not found"):
        images_by_stem(tmp_path / "absent")


def test_a_path_repeated_in_a_chunk_is_read_once_and_each_item_keeps_its_index(example_images, monkeypatch) -> None:
    from capeval import inputs

    image_1, image_2 = example_images
    reads = []
    read_bytes = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda path: reads.append(path.name) or read_bytes(path))
    paths = [image_1, str(image_2), str(image_1), image_2, image_1]
    (chunk,) = inputs.iter_scoring_items(paths, list("abcde"), chunk_size=8)
    assert sorted(reads) == ["image1.jpg", "image2.jpg"]
    assert [item.index for item in chunk.images] == [0, 1, 2, 3, 4]
    assert [item.label for item in chunk.images] == [str(image_1), str(image_2), str(image_1), str(image_2),
                                                     str(image_1)]
    assert chunk.images[0].key == chunk.images[2].key == chunk.images[4].key != chunk.images[1].key
    assert chunk.images[0].data is chunk.images[4].data  # one copy of the bytes
    reads.clear()
    chunks = list(inputs.iter_scoring_items(paths, list("abcde"), chunk_size=2))  # once per chunk that holds it
    assert sorted(reads) == ["image1.jpg", "image1.jpg", "image1.jpg", "image2.jpg", "image2.jpg"]
    assert [item.index for chunk in chunks for item in chunk.images] == [0, 1, 2, 3, 4]


def test_a_bad_path_repeated_in_a_chunk_is_named_at_its_first_item(scorer, example_images, tmp_path) -> None:
    missing = tmp_path / "missing.jpg"
    with pytest.raises(InputError, match=r"images\[1\]: file not found: .*missing.jpg"):
        scorer.score([example_images[0], missing, example_images[1], missing], list("abcd"))

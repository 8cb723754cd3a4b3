"""Video inputs: decoded frames equal the EMScore reference's cv2 frames, sampling as VATEX-EVAL-demo.py, validation
of every kind of entry, and bad input named by item.

The videos are written here with PyAV (small, synthetic: gradients and a noisy block so that chroma varies), plus the
EMScore example clip from the test data. The reference frames are read exactly as ``emscore/utils.py`` reads them.
"""
from __future__ import annotations

import pickle
import re
import subprocess
import sys
import tracemalloc
import warnings
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import clip.clip
import numpy as np
import pytest
import torch
from PIL import Image

from capeval.inputs import InputError
from capeval.models.clip.preprocessing import ImageTransform
from capeval.frame_sampling import MAX_NUM_FRAMES, frame_runs, sample_indices
from capeval.video import (VideoDecodeWarning, VideoFeatures, VideoItem, count_video_frames, decoder_version,
                           iter_distinct_video_frames, iter_video_frames, load_video_features, validate_video)
from fixtures.awkward_images import AWKWARD_IMAGES
from fixtures.paths import REPO_ROOT
from fixtures.videos import EXAMPLE_CLIP, H264, Clip, write_clip

CLIPS = [
    Clip("h264_64x48.mp4", H264, 64, 48),
    Clip("h264_1280x720.mkv", H264, 1280, 720, frames=6),
    Clip("h264_444_63x47.mp4", ("libx264",), 63, 47, pix_fmt="yuv444p"),
    Clip("h264_10bit_64x48.mp4", ("libx264",), 64, 48, pix_fmt="yuv420p10le"),
    Clip("h264_bt709_96x64.mov", ("libx264",), 96, 64, stream=dict(colorspace=1, color_primaries=1, color_trc=1)),
    Clip("h264_fullrange_64x48.mp4", ("libx264",), 64, 48, pix_fmt="yuvj420p"),
    Clip("h264_bframes_64x48.mp4", ("libx264",), 64, 48, options={"bf": "3", "g": "5"}),
    Clip("h264_rotated90_64x48.mp4", H264, 64, 48, frames=5, rotation=90),
    Clip("h264_rotated180_64x48.mp4", H264, 64, 48, frames=5, rotation=180),
    Clip("h264_rotated270_64x48.mp4", H264, 64, 48, frames=5, rotation=-90),
    Clip("mpeg4_99x67.avi", ("mpeg4",), 99, 67),
    Clip("mpeg4_98x66.mov", ("mpeg4",), 98, 66),
    Clip("vp9_81x61.webm", ("libvpx-vp9",), 81, 61),
    Clip("vp9_160x90.webm", ("libvpx-vp9",), 160, 90),
    Clip("mjpeg_64x48.avi", ("mjpeg",), 64, 48, pix_fmt="yuvj420p"),
    # the header's count (duration x rate = 0.28 s x 25) is 7 of the 12 frames: the reference reads 7
    Clip("mpeg2_64x48.mpg", ("mpeg2video",), 64, 48, expected=7),
    # variable frame rate: the header's count (10.04 s x 25 = 251) exceeds the 10 frames: the reads fail after 10
    Clip("vfr_64x48.mkv", H264, 64, 48, frames=10, pts_ms=(0, 40, 80, 120, 160, 2000, 4000, 6000, 8000, 10000)),
    # cut at 80 % of its bytes: the 9th frame fails to decode, the reference's read fails there
    Clip("mjpeg_truncated_64x48.avi", ("mjpeg",), 64, 48, expected=8, pix_fmt="yuvj420p", keep_bytes=0.8),
]


@pytest.fixture(scope="module")
def clip_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("videos")


@pytest.fixture(scope="module")
def make_clip(clip_folder: Path) -> Callable[[Clip], Path]:
    made: Dict[str, Path] = {}

    def make(clip: Clip) -> Path:
        if clip.name not in made:
            made[clip.name] = write_clip(clip, clip_folder)
        return made[clip.name]

    return make


@pytest.fixture(scope="module")
def example_clip(capeval_test_data: Path) -> Path:
    path = capeval_test_data / EXAMPLE_CLIP
    if not path.is_file():
        pytest.skip(f"needs the EMScore example clip {EXAMPLE_CLIP} in the test data")
    return path


def read_like_reference(path: Path) -> Tuple[int, List[np.ndarray]]:
    """(CAP_PROP_FRAME_COUNT, frames) read as EMScore's ``encode_video`` reads them (emscore/utils.py)."""
    cv2 = pytest.importorskip("cv2")
    cap = cv2.VideoCapture(str(path))
    frame_count = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
    frames: List[np.ndarray] = []
    count, ret = 0, True
    while count < frame_count and ret:
        ret, frame = cap.read()
        if not ret:
            break
        frames.append(np.asarray(Image.fromarray(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)).convert("RGB")))
        count += 1
    cap.release()
    return frame_count, frames


def decode_all(path: Path, num_frames: Optional[int] = None) -> List[np.ndarray]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", VideoDecodeWarning)
        images = list(iter_video_frames(path, num_frames))
    assert all(image.mode == "RGB" for image in images)
    return [np.asarray(image) for image in images]


def assert_same_frames(ours: List[np.ndarray], reference: List[np.ndarray]) -> None:
    assert len(ours) == len(reference)
    differing = [i for i, (a, b) in enumerate(zip(ours, reference)) if a.shape != b.shape or not np.array_equal(a, b)]
    assert differing == [], f"frames differing from cv2's: {differing}"


@pytest.mark.filterwarnings("ignore::capeval.video.VideoDecodeWarning")
@pytest.mark.parametrize("clip", CLIPS, ids=lambda clip: clip.name)
def test_frames_equal_the_references_cv2_frames(make_clip: Callable[[Clip], Path], clip: Clip) -> None:
    path = make_clip(clip)
    _, reference = read_like_reference(path)
    expected = clip.expected if clip.expected is not None else clip.frames
    assert len(reference) == expected
    assert count_video_frames(path) == expected
    ours = decode_all(path)
    assert_same_frames(ours, reference)
    height, width = (clip.width, clip.height) if clip.rotation % 180 else (clip.height, clip.width)
    assert ours[0].shape == (height, width, 3)


@pytest.mark.filterwarnings("ignore::capeval.video.VideoDecodeWarning")
def test_header_counts_and_failed_reads_as_cv2(make_clip: Callable[[Clip], Path]) -> None:
    """The reference stops at the header's count although more frames decode, and early where a read fails."""
    av = pytest.importorskip("av")
    by_name = {clip.name: clip for clip in CLIPS}
    counts = {}
    for name in ("mpeg2_64x48.mpg", "vfr_64x48.mkv", "mjpeg_truncated_64x48.avi"):
        path = make_clip(by_name[name])
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            decodable = 0
            try:
                for _ in container.decode(stream):
                    decodable += 1
            except av.error.InvalidDataError:
                pass
        header, frames = read_like_reference(path)
        counts[name] = (header, decodable, len(frames), count_video_frames(path))
    assert counts == {"mpeg2_64x48.mpg": (7, 12, 7, 7), "vfr_64x48.mkv": (251, 10, 10, 10),
                      "mjpeg_truncated_64x48.avi": (12, 8, 8, 8)}


def test_a_failed_read_ends_the_video_with_a_warning(make_clip: Callable[[Clip], Path]) -> None:
    path = make_clip(next(clip for clip in CLIPS if clip.name == "mjpeg_truncated_64x48.avi"))
    with pytest.warns(VideoDecodeWarning, match=r"mjpeg_truncated_64x48\.avi: decoding stopped after 8 frames "
                                                r"\(.*Invalid data.*\); those frames are used"):
        assert len(list(iter_video_frames(path))) == 8


def test_example_clip_equals_cv2(example_clip: Path) -> None:
    header, reference = read_like_reference(example_clip)
    assert (header, len(reference)) == (250, 250)
    assert_same_frames(decode_all(example_clip), reference)
    indices = sample_indices(250, 10)
    assert indices == [0, 27, 55, 83, 110, 138, 166, 193, 221, 249]
    assert_same_frames(decode_all(example_clip, num_frames=10), [reference[i] for i in indices])


def test_sample_indices_as_vatex_eval_demo() -> None:
    for total, num_frames in [(250, 10), (7, 5), (3, 7), (1, 4), (12, 1), (100, 100)]:
        assert sample_indices(total, num_frames) == np.linspace(0, total - 1, num_frames).astype(int).tolist()
    assert sample_indices(7, 5) == [0, 1, 3, 4, 6]
    assert sample_indices(3, 7) == [0, 0, 0, 1, 1, 1, 2]
    assert sample_indices(4, None) == [0, 1, 2, 3]
    with pytest.raises(InputError, match="^num_frames must be a positive integer, got 0$"):
        sample_indices(4, 0)


def test_frame_runs_are_the_samples_by_arithmetic() -> None:
    """Each distinct sampled frame once with the times np.linspace chooses it, for every small case and a spread of
    large ones, and as many steps as distinct frames: 10,000 samples of 3 frames are 3 runs."""
    rng = np.random.default_rng(0)
    cases = [(total, count) for total in range(1, 60) for count in range(1, 130)]
    cases += [(int(total), int(count))
              for total, count in zip(rng.integers(1, 10**6, 300), rng.integers(1, 10**4, 300))]
    for total, count in cases:
        indices, times = np.unique(np.linspace(0, total - 1, count).astype(int), return_counts=True)
        assert list(frame_runs(total, count)) == list(zip(indices.tolist(), times.tolist())), (total, count)
    assert list(frame_runs(3, MAX_NUM_FRAMES)) == [(0, 5000), (1, 4999), (2, 1)]
    assert list(frame_runs(3, None)) == [(0, 1), (1, 1), (2, 1)]


def test_huge_frame_counts_are_refused_at_once(make_clip: Callable[[Clip], Path]) -> None:
    """A count above the limit is refused before anything is decoded or listed (10**9 samples were a 10**9-element
    list and minutes of work)."""
    message = r"^num_frames=1000000000 is above capeval's limit of 10,000 frames sampled per video"
    with pytest.raises(InputError, match=message):
        sample_indices(250, 10**9)
    with pytest.raises(InputError, match=message):
        iter_video_frames(make_clip(CLIPS[0]), 10**9)
    with pytest.raises(InputError, match=message):
        validate_video(np.zeros((4, 2, 2, 3), np.uint8), 0).distinct_frames(10**9)
    with pytest.raises(InputError, match=message):
        VideoFeatures(np.ones((4, 8), np.float32)).sampled(10**9)


def test_each_distinct_frame_is_decoded_once(make_clip: Callable[[Clip], Path]) -> None:
    """10,000 samples of a 12-frame clip: 12 images, decoded and converted once each, with the times each is sampled;
    frames() gives each image as often as it is sampled."""
    path = make_clip(CLIPS[0])
    every = decode_all(path)
    distinct = list(iter_distinct_video_frames(path, MAX_NUM_FRAMES))
    assert [times for _, times in distinct] == [times for _, times in frame_runs(12, MAX_NUM_FRAMES)]
    assert_same_frames([np.asarray(image) for image, _ in distinct], every)
    frames = list(iter_video_frames(path, MAX_NUM_FRAMES))
    assert len(frames) == MAX_NUM_FRAMES and len({id(image) for image in frames}) == 12
    in_memory = validate_video(np.stack(every), 0)
    assert [times for _, times in in_memory.distinct_frames(30)] == [times for _, times in frame_runs(12, 30)]


@pytest.mark.parametrize("num_frames", [1, 5, 12, 30])
def test_sampled_frames_are_the_chosen_frames(make_clip: Callable[[Clip], Path], num_frames: int) -> None:
    path = make_clip(CLIPS[0])
    every = decode_all(path)
    assert_same_frames(decode_all(path, num_frames), [every[i] for i in sample_indices(12, num_frames)])
    one_thread = [np.asarray(image) for image in iter_video_frames(path, num_frames, threads=1)]
    assert_same_frames(one_thread, [every[i] for i in sample_indices(12, num_frames)])


def test_sampling_counts_the_frames_the_reference_reads(make_clip: Callable[[Clip], Path]) -> None:
    """T is 7 for the MPEG-2 file (its header's count), not the 12 frames that decode."""
    path = make_clip(next(clip for clip in CLIPS if clip.name == "mpeg2_64x48.mpg"))
    _, reference = read_like_reference(path)
    assert_same_frames(decode_all(path, 5), [reference[i] for i in (0, 1, 3, 4, 6)])


def test_frames_are_streamed(clip_folder: Path) -> None:
    """Decoding 200 frames holds a few at a time: the peak of traced memory stays under 4 frames, where keeping the
    frames takes 200."""
    path = write_clip(Clip("long_320x240.avi", ("mpeg4",), 320, 240, frames=200), clip_folder)
    frame_bytes = 320 * 240 * 3
    tracemalloc.start()
    try:
        for image in iter_video_frames(path):
            np.asarray(image).sum()
        streaming_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        kept = [np.asarray(image) for image in iter_video_frames(path)]
        keeping_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(kept) == 200
    assert streaming_peak < 4 * frame_bytes < 200 * frame_bytes <= keeping_peak


# ---------------------------------------------------------------------------------------------------------------------
# Validated entries
# ---------------------------------------------------------------------------------------------------------------------


def test_file_items_are_keyed_by_content_and_decode_after_pickling(make_clip: Callable[[Clip], Path],
                                                                   tmp_path: Path) -> None:
    path = make_clip(CLIPS[0])
    copy = tmp_path / "copy.mp4"
    copy.write_bytes(path.read_bytes())
    item = validate_video(path, 0)
    assert (item.index, item.source, item.label, item.is_features) == (0, path, str(path), False)
    assert validate_video(str(copy), 1).key == item.key
    assert validate_video(make_clip(CLIPS[1]), 0).key != item.key
    shipped = pickle.loads(pickle.dumps(item))  # as a worker process receives it
    assert_same_frames([np.asarray(image) for image in shipped.frames(4)], decode_all(path, 4))


FRAMES = np.random.default_rng(0).integers(0, 256, (5, 6, 8, 3), dtype=np.uint8)


def frames_of(item: VideoItem, num_frames: Optional[int] = None) -> List[np.ndarray]:
    return [np.asarray(image) for image in item.frames(num_frames)]


@pytest.mark.parametrize("form", ["array", "images", "arrays", "pickled images"])
def test_frame_sequences_and_arrays(form: str) -> None:
    entry = {"array": FRAMES, "arrays": list(FRAMES)}.get(form, [Image.fromarray(frame) for frame in FRAMES])
    item = validate_video(entry, 2)
    if form.startswith("pickled"):
        item = pickle.loads(pickle.dumps(item))
    assert (item.key, item.label) == (validate_video(FRAMES, 0).key, "5 frames 8x6")
    assert_same_frames(frames_of(item), list(FRAMES))
    assert_same_frames(frames_of(item, 3), [FRAMES[0], FRAMES[2], FRAMES[4]])


def test_frame_keys_follow_the_rgb_pixels() -> None:
    changed = FRAMES.copy()
    changed[4, 5, 7, 2] ^= 1
    assert validate_video(changed, 0).key != validate_video(FRAMES, 0).key
    grey = validate_video([Image.fromarray(frame[:, :, 0], mode="L") for frame in FRAMES], 0)
    as_rgb = np.repeat(FRAMES[:, :, :, :1], 3, axis=3)
    assert_same_frames(frames_of(grey), list(as_rgb))
    assert grey.key == validate_video(as_rgb, 0).key


def test_features_from_objects_and_files(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    features = rng.standard_normal((7, 16)).astype(np.float32)
    torch.save(torch.from_numpy(features), tmp_path / "video1.pt")
    np.save(tmp_path / "video1.npy", features)
    torch.save(torch.nn.Parameter(torch.from_numpy(features).double()), tmp_path / "parameter.pt")
    items = [validate_video(VideoFeatures(features), 0, feature_dim=16),
             validate_video(tmp_path / "video1.pt", 1, feature_dim=16),
             validate_video(str(tmp_path / "video1.npy"), 2),
             validate_video(tmp_path / "parameter.pt", 3)]
    assert len({item.key for item in items}) == 1
    assert all(item.is_features for item in items)
    assert items[1].label == f"features (7, 16) from {tmp_path / 'video1.pt'}"
    for item in items:
        loaded = item.features()
        assert loaded.features.dtype == np.float32 and loaded.features.flags.c_contiguous
        np.testing.assert_array_equal(loaded.features, features)
        np.testing.assert_array_equal(item.features(3).features, features[[0, 3, 6]])
    assert load_video_features(tmp_path / "video1.pt").source == str(tmp_path / "video1.pt")
    with pytest.raises(TypeError, match=r"videos\[1\] holds precomputed features; read them with features\(\)"):
        items[1].frames()
    with pytest.raises(TypeError, match=r"videos\[0\] holds video frames, not features"):
        validate_video([Image.new("RGB", (2, 2))], 0).features()


def test_decoder_version_names_pyav_and_ffmpeg() -> None:
    av = pytest.importorskip("av")
    assert decoder_version().startswith(f"PyAV {av.__version__} (libavcodec ")


def test_importing_the_module_loads_neither_pyav_nor_torch() -> None:
    code = ("import sys, capeval.video; "
            "print(sorted(m for m in ('av', 'torch', 'cv2') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            cwd=REPO_ROOT)
    assert result.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------------------------------


def _audio_only(path: Path) -> None:
    av = pytest.importorskip("av")
    with av.open(str(path), "w") as container:
        stream = container.add_stream("aac", rate=16000)
        for number in range(8):
            frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
            frame.sample_rate, frame.pts = 16000, number * 1024
            container.mux(stream.encode(frame))
        container.mux(stream.encode())


def _no_frames(path: Path) -> None:
    av = pytest.importorskip("av")
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=25)
        stream.width, stream.height = 64, 48
        container.start_encoding()


class _Pickled:
    """An object torch.load refuses with weights_only=True."""


BAD_FILES: List[Tuple[str, Callable[[Path], None], str]] = [
    ("missing.mp4", lambda path: None, r"^videos\[3\] \({path}\): file not found$"),
    ("random.mp4", lambda path: path.write_bytes(np.random.default_rng(0).bytes(5000)),
     r"^videos\[3\] \({path}\) could not be opened as a video: .*Invalid data found when processing input"),
    ("silence.mp4", _audio_only, r"^videos\[3\] \({path}\) has no video stream \(found: audio\)$"),
    ("empty.avi", _no_frames, r"^videos\[3\] \({path}\) has no frames: its video stream holds nothing that decodes$"),
    ("folder.mkv", lambda path: path.mkdir(), r"^videos\[3\] \({path}\): cannot read it: "),
    ("narrow.npy", lambda path: np.save(path, np.zeros((4, 8), np.float32)),
     r"^videos\[3\] \({path}\): features have width 8; this model needs 16$"),
    ("flat.npy", lambda path: np.save(path, np.zeros(16, np.float32)),
     r"^videos\[3\] \({path}\): features must be a \(frames, dim\) array with at least one frame, got shape \(16,\)$"),
    ("none.npy", lambda path: np.save(path, np.zeros((0, 16), np.float32)),
     r"^videos\[3\] \({path}\): features must be a \(frames, dim\) array with at least one frame, got shape "
     r"\(0, 16\)$"),
    ("nan.npy", lambda path: np.save(path, np.where(np.arange(48).reshape(3, 16) == 40, np.nan, 0.0)),
     r"^videos\[3\] \({path}\): features hold NaN or infinite values \(frame 2\)$"),
    ("text.npy", lambda path: np.save(path, np.array([["a"] * 16])),
     r"^videos\[3\] \({path}\): features must hold real numbers, got dtype <U1$"),
    ("objects.npy", lambda path: np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True),
     r"^videos\[3\] \({path}\) is not a readable \.npy array file: Object arrays cannot be loaded"),
    ("dict.pt", lambda path: __import__("torch").save({"features": __import__("torch").zeros(3, 16)}, path),
     r"^videos\[3\] \({path}\) holds a dict with keys \['features'\], not a plain tensor; a feature file holds one "
     r"\(frames, dim\) tensor$"),
    ("list.pt", lambda path: __import__("torch").save([__import__("torch").zeros(3, 16)], path),
     r"^videos\[3\] \({path}\) holds a list, not a plain tensor"),
    ("object.pt", lambda path: __import__("torch").save(_Pickled(), path),
     r"^videos\[3\] \({path}\) is not a plain tensor file \(torch\.load with weights_only=True refused it: "),
    ("notatensor.pt", lambda path: path.write_bytes(b"plain text"),
     r"^videos\[3\] \({path}\) is not a plain tensor file \(torch\.load with weights_only=True refused it: "),
    ("complex.pt", lambda path: __import__("torch").save(__import__("torch").zeros(3, 16, dtype=__import__(
        "torch").complex64), path),
     r"^videos\[3\] \({path}\): the tensor must be a dense tensor of real numbers, got torch\.complex64"),
    ("wide.pt", lambda path: __import__("torch").save(__import__("torch").zeros(3, 16, 2), path),
     r"^videos\[3\] \({path}\): features must be a \(frames, dim\) array with at least one frame, got shape "
     r"\(3, 16, 2\)$"),
]


@pytest.mark.parametrize("name, make, message", BAD_FILES, ids=[name for name, _, _ in BAD_FILES])
def test_bad_files_name_the_item(tmp_path: Path, name: str, make: Callable[[Path], None], message: str) -> None:
    if name.endswith(".pt"):
        pytest.importorskip("torch")
    path = tmp_path / name
    make(path)
    with pytest.raises(InputError, match=message.format(path=re.escape(str(path)))):
        validate_video(path, 3, feature_dim=16)


GREY = Image.new("L", (8, 6))
BAD_ENTRIES: List[Tuple[str, object, str]] = [
    ("empty list", [], r"^videos\[3\] is an empty frame sequence; a video needs at least one frame$"),
    ("empty array", np.zeros((0, 6, 8, 3), np.uint8),
     r"^videos\[3\] is an empty frame array; a video needs at least one frame$"),
    ("float array", np.zeros((2, 6, 8, 3), np.float32), r"^videos\[3\]: frame arrays must be uint8 RGB, got dtype "
                                                        r"float32$"),
    ("grey array", np.zeros((2, 6, 8), np.uint8),
     r"^videos\[3\]: expected a \(frames, height, width, 3\) RGB array, got shape \(2, 6, 8\)$"),
    ("features array", np.zeros((2, 512), np.float32), r"^videos\[3\]: a 2-D array is not a video; wrap precomputed "
                                                     r"\(frames, dim\) features in VideoFeatures\(\.\.\.\)$"),
    ("zero-size frames", np.zeros((2, 0, 8, 3), np.uint8), r"^videos\[3\]: empty frames \(8x0\)$"),
    ("mixed sizes", [GREY, Image.new("RGB", (8, 6)), Image.new("RGB", (6, 8))],
     r"^videos\[3\]\[2\] is 6x8 but videos\[3\]\[0\] is 8x6; all frames of a video must have one size$"),
    ("mixed dtypes", [np.zeros((6, 8, 3), np.uint8), np.zeros((6, 8, 3), np.int64)],
     r"^videos\[3\]\[1\]: frame arrays must be uint8 RGB, got dtype int64$"),
    ("frame shape", [np.zeros((6, 8, 4), np.uint8)],
     r"^videos\[3\]\[0\]: expected a \(height, width, 3\) RGB array, got shape \(6, 8, 4\)$"),
    ("frame type", [GREY, "frame.png"], r"^videos\[3\]\[1\] has type str; frames are PIL images or uint8 "),
    ("empty image", [Image.new("RGB", (0, 4))], r"^videos\[3\]\[0\]: empty image \(0x4\)$"),
    ("one image", GREY, r"^videos\[3\] has type Image; expected a video file path, a sequence of frames, a uint8 "
                        r"\(frames, height, width, 3\) array or VideoFeatures; a video's frames are a list of images$"),
    ("bytes", b"\x00\x00", r"^videos\[3\] has type bytes; expected a video file path"),
    ("nan features", VideoFeatures(np.full((2, 16), np.nan)), r"^videos\[3\]: features hold NaN or infinite values "
                                                              r"\(frame 0\)$"),
    ("huge features", VideoFeatures(np.full((2, 16), 1e300)),
     r"^videos\[3\]: frame 0 is too large for float32 arithmetic \(its squared norm is inf; float32 holds "),
    ("named features", VideoFeatures(np.zeros((2, 3)), source="clip7.pt"),
     r"^videos\[3\] \(clip7\.pt\): features have width 3; this model needs 16$"),
]


@pytest.mark.parametrize("name, entry, message", BAD_ENTRIES, ids=[name for name, _, _ in BAD_ENTRIES])
def test_bad_entries_name_the_item(name: str, entry: object, message: str) -> None:
    with pytest.raises(InputError, match=message):
        validate_video(entry, 3, feature_dim=16)


def test_a_closed_image_frame_names_the_frame(tmp_path: Path) -> None:
    Image.new("RGB", (4, 4)).save(tmp_path / "frame.png")
    image = Image.open(tmp_path / "frame.png")
    image.close()
    with pytest.raises(InputError, match=r"^videos\[1\]\[0\] cannot be converted to RGB: "):
        validate_video([image], 1)


def test_without_pyav_files_ask_for_the_extra(make_clip: Callable[[Clip], Path],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    path = make_clip(CLIPS[0])
    item = validate_video(path, 0)
    monkeypatch.setitem(sys.modules, "av", None)  # `import av` now raises ImportError
    message = rf'^videos\[3\] \({re.escape(str(path))}\): decoding video files needs PyAV, which is not installed: ' \
              r'pip install "capeval\[video\]"$'
    with pytest.raises(InputError, match=message):
        validate_video(path, 3)
    with pytest.raises(InputError, match=r"^videos\[0\] .*pip install \"capeval\[video\]\"$"):
        item.frames()
    assert decoder_version() is None
    assert validate_video([GREY], 3).label == "1 frame 8x6"  # frames and features need no decoder
    assert validate_video(VideoFeatures(np.zeros((2, 4))), 3).is_features


def test_num_frames_is_checked_before_decoding(make_clip: Callable[[Clip], Path]) -> None:
    path = make_clip(CLIPS[0])
    for bad, shown in [(0, "0"), (-2, "-2"), (2.5, "float 2.5"), (True, "bool True")]:
        with pytest.raises(InputError, match=rf"^num_frames must be a positive integer, got {shown}$"):
            iter_video_frames(path, bad)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"^threads must be a non-negative integer, got -1$"):
        iter_video_frames(path, threads=-1)


@pytest.mark.parametrize("name", AWKWARD_IMAGES)
def test_frames_given_as_images_are_converted_before_the_transform(awkward_images: Dict[str, Path],
                                                                   name: str) -> None:
    """EMScore's frames reach CLIP's transform as ``Image.fromarray(frame_rgb).convert("RGB")``: RGB, so that the
    transform's own conversion after the crop changes nothing; frames given as images of any mode are read so."""
    image = Image.open(awkward_images[name])
    [frame] = list(validate_video([image], 0).frames(None))
    transform = ImageTransform(224)
    expected = clip.clip._transform(224)(image.convert("RGB"))
    assert torch.equal(transform.normalize(transform.to_uint8(frame, "frame")[None])[0], expected)

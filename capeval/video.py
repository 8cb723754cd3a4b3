"""Video inputs: every entry of ``videos`` is checked here, once, and becomes a :class:`VideoItem` that a worker
process decodes later, frame by frame.

An entry is a video file (decoded with PyAV, the optional ``capeval[video]`` extra), a sequence of frames (PIL images or
uint8 H x W x 3 arrays, or one uint8 T x H x W x 3 array), precomputed frame features (:class:`VideoFeatures`), or a
``.pt`` / ``.npy`` feature file of shape (T, D) as the VATEX-EVAL release ships them.

Video files are decoded to exactly the frames the EMScore reference reads with OpenCV (``emscore/utils.py``
``encode_video``): ``cv2.VideoCapture`` read in order while fewer than ``CAP_PROP_FRAME_COUNT`` frames were read and the
last read succeeded, BGR -> RGB, ``PIL.Image.fromarray``. That is, here:

* the first video stream of the file, its frames in decoding order. A still image (a file FFmpeg reads with its
  image demuxers: JPEG, PNG, WebP, BMP...), a file without a video stream (audio only) and a file whose video stream
  is an attached picture (an audio file's cover art) are refused, where the reference would score a picture as a
  one-frame video; an animated GIF is a video;
* at most the count cv2 reports: the stream's frame count from the container, else ``floor(duration * rate + 0.5)``
  (both from the header, so the count can be smaller than the frames that decode: the reference then reads only that
  many, and so does capeval). Where the header gives no positive count, the reference reads nothing and fails; capeval
  reads every frame;
* a decoding error ends the video, as a failed read ends the reference's loop (with a :class:`VideoDecodeWarning`);
* each frame converted to BGR24 by libswscale with bicubic flags, as cv2 converts it, then its channels reversed
  (cv2's ``COLOR_BGR2RGB``), then turned by the stream's display matrix when it is a multiple of 90 degrees, as cv2
  turns it (a flip in the matrix is ignored, as cv2 ignores it).

The frames equal cv2's pixel for pixel (tests/core/test_video_inputs.py, checked with opencv-python-headless 5.0.0 and
PyAV 18.1.0, both on FFmpeg 8 libraries); cv2 builds on older FFmpeg libraries may convert colour-tagged videos
otherwise.

Frames are streamed: the frames held at once are the decoder's (its reference frames and threads) and the one being
converted, whatever the length of the video. With ``num_frames=n``, frames are sampled as VATEX-EVAL-demo.py samples
them, ``np.linspace(0, T - 1, n)`` cast to int, where T is the number of frames the reference's loop reads; for a file
T is counted by decoding the video once without converting its frames (the header's count is not trusted), then the
chosen frames are decoded and converted in a second pass that stops after the last of them. The sample is computed by
arithmetic, run by run (:func:`frame_runs`), and a frame sampled several times (``n > T``) is converted once and given
with the times it is sampled, so that the work is bounded by the video's frames; ``n`` is at most
:data:`~capeval.frame_sampling.MAX_NUM_FRAMES`.
"""
from __future__ import annotations

import hashlib
import math
import os
import warnings
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
from PIL import Image

from capeval.inputs import InputError, float32_rows
from capeval.frame_sampling import check_num_frames, frame_runs, sample_indices
from capeval.options import check_positive_int

if TYPE_CHECKING:
    import av

FEATURE_SUFFIXES = frozenset({".pt", ".npy"})
"""File name endings read as precomputed frame features rather than decoded as video."""

VIDEO_EXTENSIONS = frozenset({".mp4", ".m4v", ".webm", ".mkv", ".avi", ".mov", ".mpg", ".mpeg", ".wmv", ".flv", ".ogv",
                              ".3gp"})
"""File extensions (any case) of the video files read from a folder (``capeval score --videos``); any file PyAV opens
can be given as a path."""

INSTALL_HINT = 'pip install "capeval[video]"'

Frame = Union[Image.Image, np.ndarray]
"""One frame given in memory: a PIL image or a uint8 H x W x 3 RGB array."""

VideoInput = Union[str, "os.PathLike[str]", Sequence[Frame], np.ndarray, "VideoFeatures"]
"""A video as a file path (a video, or a ``.pt`` / ``.npy`` feature file), a sequence of frames, a uint8
T x H x W x 3 array, or :class:`VideoFeatures`."""


class VideoDecodeWarning(UserWarning):
    """Decoding a video file failed part way; the frames before the failure are used, as the reference's cv2 loop
    uses them."""


def _where(index: Optional[int], label: Optional[str]) -> str:
    """How errors name a video: ``videos[3] (clip.mp4)``, ``videos[3]``, or the label alone outside a list."""
    if index is None:
        return label or "video"
    return f"videos[{index}] ({label})" if label else f"videos[{index}]"


# --------------------------------------------------------------------------------------------------------------------
# Precomputed features
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class VideoFeatures:
    """Precomputed frame features of one video: ``features`` (T, D) float, one row per frame, as EMScore's
    ``extract_video_embeddings.py`` saves them; ``source`` optionally names where they came from (a file path).

    Use :meth:`validated` to check an instance against what a metric needs; it names the item on failure.
    """

    features: np.ndarray
    source: Optional[str] = None

    def validated(self, index: Optional[int] = None, *, feature_dim: Optional[int] = None) -> "VideoFeatures":
        """A copy with float32 C-contiguous ``features``, or an :class:`InputError` naming ``videos[index]`` (and the
        source) when the shape, dtype or values are unusable; ``feature_dim`` is the width the model needs."""
        where = _where(index, self.source)
        try:
            features = np.asarray(self.features)
        except Exception as error:  # ragged nested lists and the like
            raise InputError(f"{where}: features are not an array: {error}") from None
        if features.dtype.kind not in "fiu":
            raise InputError(f"{where}: features must hold real numbers, got dtype {features.dtype}")
        if features.ndim != 2 or features.shape[0] < 1 or features.shape[1] < 1:
            raise InputError(f"{where}: features must be a (frames, dim) array with at least one frame, "
                             f"got shape {features.shape}")
        if feature_dim is not None and features.shape[1] != feature_dim:
            raise InputError(f"{where}: features have width {features.shape[1]}; this model needs {feature_dim}")
        if not np.all(np.isfinite(features)):
            row = int(np.flatnonzero(~np.isfinite(features).all(axis=1))[0])
            raise InputError(f"{where}: features hold NaN or infinite values (frame {row})")
        return VideoFeatures(float32_rows(features, where, "frame"), self.source)

    def content_key(self) -> str:
        """A hash of the features as float32 (not of the source): equal features share cache rows whatever file or
        object held them."""
        features = np.ascontiguousarray(self.features, dtype=np.float32)
        return _hasher(b"features", repr(features.shape).encode(), features.tobytes()).hexdigest()

    def sampled(self, num_frames: Optional[int]) -> "VideoFeatures":
        """The rows :func:`sample_indices` keeps (all of them for ``None``), as VATEX-EVAL-demo.py samples the
        release's features."""
        if num_frames is None:
            return self
        return VideoFeatures(self.features[sample_indices(len(self.features), num_frames)], self.source)


def load_video_features(path: Union[str, "os.PathLike[str]"], index: Optional[int] = None, *,
                        feature_dim: Optional[int] = None) -> VideoFeatures:
    """Read and validate a feature file of shape (T, D): ``.pt`` holding one plain tensor (read with
    ``torch.load(weights_only=True)``, so nothing in it is executed) or ``.npy`` (read without pickles).

    Errors are :class:`InputError` naming ``videos[index]`` and the file.
    """
    path = Path(path)
    where = _where(index, str(path))
    if not path.is_file():
        raise InputError(f"{where}: {'not a file' if path.exists() else 'file not found'}")
    suffix = path.suffix.lower()
    if suffix == ".pt":
        features = _read_tensor_file(path, where)
    elif suffix == ".npy":
        try:
            features = np.load(path, allow_pickle=False)
        except Exception as error:  # not an .npy file, object arrays (pickles), truncated data
            raise InputError(f"{where} is not a readable .npy array file: {error}") from None
        if not isinstance(features, np.ndarray):
            raise InputError(f"{where} holds {type(features).__name__}, not one array")
    else:
        raise InputError(f"{where}: feature files end in .pt or .npy, got {path.suffix!r}")
    return VideoFeatures(features, str(path)).validated(index, feature_dim=feature_dim)


def _read_tensor_file(path: Path, where: str) -> np.ndarray:
    import torch

    try:
        value = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # pickled objects other than tensors and containers, non-torch files
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise InputError(f"{where} is not a plain tensor file (torch.load with weights_only=True refused it: "
                         f"{reason})") from None
    if not isinstance(value, torch.Tensor):
        held = f"a dict with keys {sorted(map(str, value))[:5]}" if isinstance(value, dict) else \
            f"a {type(value).__name__}"
        raise InputError(f"{where} holds {held}, not a plain tensor; a feature file holds one (frames, dim) tensor")
    if value.layout != torch.strided or value.dtype.is_complex or value.dtype == torch.bool:
        raise InputError(f"{where}: the tensor must be a dense tensor of real numbers, got {value.dtype} "
                         f"({value.layout})")
    return value.detach().to(torch.float32).numpy()


# --------------------------------------------------------------------------------------------------------------------
# Decoding video files
# --------------------------------------------------------------------------------------------------------------------


def _import_av(where: str) -> Any:
    try:
        import av
    except ImportError:
        raise InputError(f"{where}: decoding video files needs PyAV, which is not installed: {INSTALL_HINT}") from None
    return av


def decoder_version() -> Optional[str]:
    """The decoder of video files as a result signature records it (PyAV and its FFmpeg libraries), or ``None`` when
    PyAV is not installed."""
    try:
        import av
    except ImportError:
        return None
    versions = av.library_versions
    return (f"PyAV {av.__version__} (libavcodec {'.'.join(map(str, versions['libavcodec']))}, "
            f"libswscale {'.'.join(map(str, versions['libswscale']))})")


@contextmanager
def _opened(path: Path, where: str,
            threads: int = 0) -> Iterator[Tuple["av.container.InputContainer", "av.VideoStream"]]:
    """The container and its first video stream (the one cv2 reads), closed on exit; the stream decodes with frame
    and slice threads as cv2's does, ``threads`` of them (0: FFmpeg's choice, one per core)."""
    av = _import_av(where)
    try:
        container = av.open(str(path))
    except FileNotFoundError:
        raise InputError(f"{where}: file not found") from None
    except Exception as error:  # FFmpeg's errors for files it cannot open or parse
        raise InputError(f"{where} could not be opened as a video: {error}") from None
    with container:
        format_name = container.format.name
        if format_name == "image2" or format_name.endswith("_pipe"):  # FFmpeg's demuxers of still images
            raise InputError(f"{where} is a still image ({container.format.long_name}), not a video; give a video "
                             "file, or a video's frames as a list of images (score an image with images= / --images)")
        if not container.streams.video:
            kinds = sorted({stream.type for stream in container.streams}) or ["no streams"]
            raise InputError(f"{where} has no video stream (found: {', '.join(kinds)})")
        stream = container.streams.video[0]
        if stream.disposition & av.stream.Disposition.attached_pic:
            others = sorted({other.type for other in container.streams if other is not stream}) or ["nothing"]
            raise InputError(f"{where} has no video stream, only an attached picture (cover art) beside its "
                             f"{', '.join(others)}")
        stream.thread_type = "AUTO"  # the same frames, decoded faster
        stream.thread_count = threads
        yield container, stream


def _header_frame_count(container: "av.container.InputContainer", stream: "av.VideoStream") -> int:
    """``CAP_PROP_FRAME_COUNT`` as cv2's FFmpeg backend computes it (``get_total_frames``): the stream's frame count,
    else ``floor(duration * rate + 0.5)`` with the container's duration (the stream's when under 25 us) and FFmpeg's
    guessed frame rate, in the same double arithmetic. Negative or 0 when the header says nothing."""
    if stream.frames:
        return int(stream.frames)
    seconds = container.duration / 1_000_000 if container.duration is not None else -math.inf
    if seconds < 0.000025:
        time_base = stream.time_base
        seconds = (float(stream.duration) * (time_base.numerator / time_base.denominator)
                   if stream.duration is not None and time_base else -math.inf)
    rate = stream.guessed_rate
    fps = rate.numerator / rate.denominator if rate else 0.0
    count = seconds * fps + 0.5
    return math.floor(count) if math.isfinite(count) else -1


def _decoded(container: "av.container.InputContainer", stream: "av.VideoStream",
             where: str) -> Iterator["av.VideoFrame"]:
    """The frames the reference's cv2 loop reads, unconverted: in decoding order, at most :func:`_header_frame_count`
    of them (all when it is not positive), until the first decoding error. None at all is an :class:`InputError`."""
    av = _import_av(where)
    limit = _header_frame_count(container, stream)
    frames = container.decode(stream)
    count = 0
    while limit <= 0 or count < limit:
        try:
            frame = next(frames)
        except StopIteration:
            break
        except av.error.FFmpegError as error:
            if count == 0:
                raise InputError(f"{where}: no frame could be decoded: {error}") from None
            warnings.warn(VideoDecodeWarning(
                f"{where}: decoding stopped after {count} frames ({error}); those frames are used, as the reference's "
                "cv2 loop stops at its first failed read"), stacklevel=2)
            break
        yield frame
        count += 1
    if count == 0:
        raise InputError(f"{where} has no frames: its video stream holds nothing that decodes")


_TURNS = (None, Image.Transpose.ROTATE_90, Image.Transpose.ROTATE_180, Image.Transpose.ROTATE_270)
"""The counter-clockwise turns by 0, 90, 180 and 270 degrees."""


def _turn(frame: "av.VideoFrame") -> Optional[Image.Transpose]:
    """The turn cv2 gives frames of the display matrix of ``frame`` (``CAP_PROP_ORIENTATION_AUTO``): its rotation
    when that is a multiple of 90 degrees; none for any other angle or a degenerate matrix."""
    try:
        degrees = int(frame.rotation)
    except ValueError:  # av_display_rotation_get gives NaN for a degenerate matrix
        return None
    return _TURNS[(degrees // 90) % 4] if degrees % 90 == 0 else None


class _Conversion:
    """Converts decoded frames to the PIL images cv2's path gives for them. One libswscale context serves the whole
    video; every frame is turned by the first frame's display matrix (cv2 reads the stream's once)."""

    def __init__(self, where: str) -> None:
        self._av = _import_av(where)
        self._where = where
        self._reformatter = self._av.video.reformatter.VideoReformatter()
        self._turns: List[Optional[Image.Transpose]] = []

    def __call__(self, frame: "av.VideoFrame", number: int) -> Image.Image:
        if not self._turns:
            self._turns.append(_turn(frame))
        try:
            bgr = self._reformatter.reformat(frame, format="bgr24", interpolation="BICUBIC", threads=1)
        except self._av.error.FFmpegError as error:  # pixel formats libswscale cannot convert
            raise InputError(f"{self._where}: frame {number} ({frame.format.name}) could not be converted to RGB: "
                             f"{error}") from None
        plane = bgr.planes[0]
        # PIL's BGR unpacking reverses the channels as cv2's COLOR_BGR2RGB does (and copies out of the frame)
        image = Image.frombytes("RGB", (bgr.width, bgr.height), memoryview(plane), "raw", "BGR", plane.line_size)
        return image.transpose(self._turns[0]) if self._turns[0] is not None else image


def count_video_frames(path: Union[str, "os.PathLike[str]"], *, name: Optional[str] = None, threads: int = 0) -> int:
    """T: the number of frames the reference's cv2 loop reads from the file, counted by decoding it (no conversion).
    ``name`` names the video in errors (default: the path); ``threads`` is the decoder's (0: one per core)."""
    where = name or str(path)
    with _opened(Path(path), where, threads) as (container, stream):
        return sum(1 for _ in _decoded(container, stream, where))


def iter_video_frames(path: Union[str, "os.PathLike[str]"], num_frames: Optional[int] = None, *,
                      name: Optional[str] = None, threads: int = 0) -> Iterator[Image.Image]:
    """The frames of a video file as the EMScore reference's cv2 path delivers them (RGB PIL images), streamed.

    ``num_frames=None`` gives every frame; an int gives the frames :func:`sample_indices` chooses of the T the
    reference reads (a first pass decodes the file to count T), a frame sampled several times given as often (the same
    image: it is decoded and converted once). ``name`` names the video in errors (default: the path); ``threads`` is
    the decoder's number of threads (0: one per core; 1 suits several decoding processes).
    Errors are :class:`InputError`; a failure part way is a :class:`VideoDecodeWarning` and ends the frames.
    The arguments and PyAV are checked at the call; the file is read as the frames are taken.
    """
    return repeated(iter_distinct_video_frames(path, num_frames, name=name, threads=threads))


def iter_distinct_video_frames(path: Union[str, "os.PathLike[str]"], num_frames: Optional[int] = None, *,
                               name: Optional[str] = None,
                               threads: int = 0) -> Iterator[Tuple[Image.Image, int]]:
    """:func:`iter_video_frames` with each distinct frame once: (image, times sampled) in order, so that the work is
    bounded by the frames of the video whatever ``num_frames``."""
    check_num_frames(num_frames)
    check_positive_int(threads, "threads", minimum=0)
    where = name or str(path)
    _import_av(where)
    return _converted_frames(Path(path), where, num_frames, threads)


def repeated(frames: Iterator[Tuple[Image.Image, int]]) -> Iterator[Image.Image]:
    """Each image of (image, times) pairs, ``times`` times."""
    for image, times in frames:
        for _ in range(times):
            yield image


def _converted_frames(path: Path, where: str, num_frames: Optional[int],
                      threads: int) -> Iterator[Tuple[Image.Image, int]]:
    """Decode ``path``, converting every frame, or (``num_frames`` given) count its frames first, then decode it
    again converting only the sampled ones (each once, with the times it is sampled) and stop after the last of
    them."""
    convert = _Conversion(where)
    if num_frames is None:
        with _opened(path, where, threads) as (container, stream):
            for number, frame in enumerate(_decoded(container, stream, where)):
                yield convert(frame, number), 1
        return
    total = count_video_frames(path, name=where, threads=threads)
    runs = frame_runs(total, num_frames)
    wanted, times = next(runs)
    with _opened(path, where, threads) as (container, stream):
        for number, frame in enumerate(_decoded(container, stream, where)):
            if number == wanted:
                yield convert(frame, number), times
                following = next(runs, None)
                if following is None:
                    return
                wanted, times = following
    raise InputError(f"{where}: the file gave fewer frames on a second read than on the first ({total} were "
                     "counted); was it changed meanwhile?")


# --------------------------------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------------------------------


def _hasher(kind: bytes, *parts: bytes) -> "hashlib.blake2b":
    hasher = hashlib.blake2b(digest_size=16, person=b"capeval-video")
    hasher.update(kind)
    for part in parts:
        hasher.update(part)
    return hasher


@dataclass(frozen=True)
class VideoItem:
    """A validated video: its position in the input, a content key and a source that a worker process reads.

    ``source`` is a file path (decoded by :meth:`frames`), frames held in memory (a tuple of PIL images / arrays, or a
    T x H x W x 3 array) or :class:`VideoFeatures` (read by :meth:`features`). ``key`` hashes the content: the file's
    bytes, the frames' RGB pixels, or the features; the key of a cache row must add what else changes the result
    (``num_frames``, the model, :func:`decoder_version` for files).
    """

    index: int
    key: str
    source: Union[Path, Tuple[Frame, ...], np.ndarray, VideoFeatures]
    label: str

    @property
    def is_features(self) -> bool:
        """Whether the entry was precomputed features (read with :meth:`features`, not :meth:`frames`)."""
        return isinstance(self.source, VideoFeatures)

    def frames(self, num_frames: Optional[int] = None, *, threads: int = 0) -> Iterator[Image.Image]:
        """The video's frames as RGB PIL images (streamed from a file), all or ``num_frames`` sampled as
        :func:`sample_indices` samples them; ``threads`` is the decoder's for a file (0: one per core)."""
        return repeated(self.distinct_frames(num_frames, threads=threads))

    def distinct_frames(self, num_frames: Optional[int] = None, *,
                        threads: int = 0) -> Iterator[Tuple[Image.Image, int]]:
        """:meth:`frames` with each distinct frame once, as (image, times sampled): each is decoded and converted
        once however often it is sampled."""
        if isinstance(self.source, VideoFeatures):
            raise TypeError(f"videos[{self.index}] holds precomputed features; read them with features()")
        if isinstance(self.source, Path):
            return iter_distinct_video_frames(self.source, num_frames, name=_where(self.index, self.label),
                                              threads=threads)
        check_num_frames(num_frames)
        source = self.source
        return ((_memory_frame_to_pil(source[index]), times) for index, times in frame_runs(len(source), num_frames))

    def features(self, num_frames: Optional[int] = None) -> VideoFeatures:
        """The precomputed features, all rows or ``num_frames`` sampled as :func:`sample_indices` samples them."""
        if not isinstance(self.source, VideoFeatures):
            raise TypeError(f"videos[{self.index}] holds video frames, not features; read them with frames()")
        return self.source.sampled(num_frames)


def _memory_frame_to_pil(frame: Frame) -> Image.Image:
    """The reference's ``Image.fromarray(frame).convert("RGB")`` for an array; ``convert("RGB")`` for an image."""
    if isinstance(frame, Image.Image):
        return frame.convert("RGB")
    return Image.fromarray(np.ascontiguousarray(frame))


def validate_video(video: VideoInput, index: int, *, feature_dim: Optional[int] = None) -> VideoItem:
    """Check one ``videos`` entry and wrap it with its content key; ``feature_dim`` (the model's embedding width)
    checks precomputed features. Video files are hashed and opened, and their first frame decoded; nothing else is
    decoded here. Errors are :class:`InputError` naming ``videos[index]``."""
    if isinstance(video, (str, os.PathLike)):
        path = Path(video)
        if path.suffix.lower() in FEATURE_SUFFIXES:
            features = load_video_features(path, index, feature_dim=feature_dim)
            return VideoItem(index, features.content_key(), features, f"features {features.features.shape} from "
                                                                      f"{path}")
        key = _file_key(path, index)
        _probe_file(path, _where(index, str(path)))
        return VideoItem(index, key, path, str(path))
    if isinstance(video, VideoFeatures):
        features = video.validated(index, feature_dim=feature_dim)
        return VideoItem(index, features.content_key(), features, f"features {features.features.shape}")
    if isinstance(video, np.ndarray):
        return _array_item(video, index)
    if isinstance(video, Sequence) and not isinstance(video, (str, bytes, bytearray)):
        return _frames_item(video, index)
    hint = ""
    if isinstance(video, Image.Image):
        hint = "; a video's frames are a list of images"
    raise InputError(f"videos[{index}] has type {type(video).__name__}; expected a video file path, a sequence of "
                     f"frames, a uint8 (frames, height, width, 3) array or VideoFeatures{hint}")


def probe_video_files(videos: Sequence[VideoInput]) -> None:
    """Open each video file of ``videos`` (feature files and frames aside) and decode its first frame, as
    :func:`validate_video` does, without reading the whole file: a command checks its videos so before it loads a
    model. Errors are :class:`InputError` naming ``videos[index]`` and the file."""
    for index, video in enumerate(videos):
        if isinstance(video, (str, os.PathLike)) and Path(video).suffix.lower() not in FEATURE_SUFFIXES:
            _probe_file(Path(video), _where(index, str(video)))


def _probe_file(path: Path, where: str) -> None:
    """The file opens as a video and its first frame decodes (no frame at all is an :class:`InputError`)."""
    with _opened(path, where, threads=1) as (container, stream), \
            closing(_decoded(container, stream, where)) as frames:
        next(frames)


def _file_key(path: Path, index: int) -> str:
    """The hash of the file's bytes, read in blocks."""
    try:
        with path.open("rb") as file:
            hasher = _hasher(b"file")
            for block in iter(lambda: file.read(1 << 20), b""):
                hasher.update(block)
    except FileNotFoundError:
        raise InputError(f"{_where(index, str(path))}: file not found") from None
    except OSError as error:
        raise InputError(f"{_where(index, str(path))}: cannot read it: {error}") from None
    return hasher.hexdigest()


def _array_item(array: np.ndarray, index: int) -> VideoItem:
    where = f"videos[{index}]"
    if array.ndim == 2:
        raise InputError(f"{where}: a 2-D array is not a video; wrap precomputed (frames, dim) features in "
                         "VideoFeatures(...)")
    if array.dtype != np.uint8:
        raise InputError(f"{where}: frame arrays must be uint8 RGB, got dtype {array.dtype}")
    if array.ndim != 4 or array.shape[3] != 3:
        raise InputError(f"{where}: expected a (frames, height, width, 3) RGB array, got shape {array.shape}")
    frames, height, width = array.shape[:3]
    if frames == 0:
        raise InputError(f"{where} is an empty frame array; a video needs at least one frame")
    if height == 0 or width == 0:
        raise InputError(f"{where}: empty frames ({width}x{height})")
    pixels = np.ascontiguousarray(array)
    key = _hasher(b"frames", repr(array.shape).encode(), pixels.tobytes()).hexdigest()
    return VideoItem(index, key, array, _frames_label(frames, width, height))


def _frames_item(frames: Sequence[Any], index: int) -> VideoItem:
    if len(frames) == 0:
        raise InputError(f"videos[{index}] is an empty frame sequence; a video needs at least one frame")
    first = _frame_pixels(frames[0], f"videos[{index}][0]")
    height, width = first.shape[:2]
    hasher = _hasher(b"frames", repr((len(frames), *first.shape)).encode(), first.tobytes())
    for number in range(1, len(frames)):
        rgb = _frame_pixels(frames[number], f"videos[{index}][{number}]")
        if rgb.shape != first.shape:
            raise InputError(f"videos[{index}][{number}] is {rgb.shape[1]}x{rgb.shape[0]} but videos[{index}][0] is "
                             f"{width}x{height}; all frames of a video must have one size")
        hasher.update(rgb.tobytes())
    return VideoItem(index, hasher.hexdigest(), tuple(frames), _frames_label(len(frames), width, height))


def _frames_label(count: int, width: int, height: int) -> str:
    return f"{count} frame{'' if count == 1 else 's'} {width}x{height}"


def _frame_pixels(frame: object, where: str) -> np.ndarray:
    """The frame's RGB pixels as a C-contiguous uint8 H x W x 3 array (what the content key hashes)."""
    if isinstance(frame, Image.Image):
        return _image_pixels(frame, where)
    if not isinstance(frame, np.ndarray):
        raise InputError(f"{where} has type {type(frame).__name__}; frames are PIL images or uint8 (height, width, 3) "
                         "arrays")
    if frame.dtype != np.uint8:
        raise InputError(f"{where}: frame arrays must be uint8 RGB, got dtype {frame.dtype}")
    if frame.ndim != 3 or frame.shape[2] != 3 or 0 in frame.shape:
        raise InputError(f"{where}: expected a (height, width, 3) RGB array, got shape {frame.shape}")
    return np.ascontiguousarray(frame)


def _image_pixels(image: Image.Image, where: str) -> np.ndarray:
    width, height = image.size
    if width == 0 or height == 0:
        raise InputError(f"{where}: empty image ({width}x{height})")
    try:
        return np.asarray(image.convert("RGB"))
    except Exception as error:  # closed or unloadable images, modes PIL cannot convert
        raise InputError(f"{where} cannot be converted to RGB: {error}") from None

"""Input validation: every image, caption and reference list is checked here, once, before any model work.

Errors name the offending item by index. Images become :class:`ImageItem` objects carrying a content hash, so the
embedding engine can encode each distinct image once whatever form it arrived in; a file keeps its path, and is read
again where it is decoded. Files may be read, checked and hashed in worker processes (:mod:`capeval.file_checks`), so
that the scoring process does not spend its own time on them. Folders of images (the commands' ``--images``) are read
by :func:`images_by_stem`.
"""
from __future__ import annotations

import hashlib
import io
import os
import unicodedata
import warnings
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import (TYPE_CHECKING, AbstractSet, Any, Callable, Dict, Generator, Iterable, Iterator, List, Optional,
                    Sequence, Tuple, Union)

import numpy as np
from PIL import Image

if TYPE_CHECKING:
    from capeval.file_checks import FileChecks

ImageInput = Union[str, "os.PathLike[str]", Image.Image, np.ndarray, bytes, bytearray]
"""An image as a file path, a PIL image, a uint8 array (HW, HWC with C in 1/3/4) or encoded file bytes."""


class InputError(ValueError):
    """Invalid user input; the message names the item (index or key) and what is wrong with it."""


FileOutcome = Union[str, InputError]
"""What checking an image file gives: its content hash, or the :class:`InputError` that names what is wrong with it."""


def _digest(*parts: bytes) -> str:
    hasher = hashlib.blake2b(digest_size=16)
    for part in parts:
        hasher.update(part)
    return hasher.hexdigest()


@dataclass(frozen=True)
class ImageItem:
    """A validated image: its position in the input, a content hash and a source that :meth:`open` decodes: encoded
    bytes, a PIL image, or the path of a file (read when opened; the hash of a file is that of its bytes)."""

    index: int
    key: str
    data: Union[bytes, Image.Image, Path]
    label: str

    def open(self) -> Image.Image:
        """The image exactly as ``PIL.Image.open`` gives it (no EXIF rotation, no colour conversion). A file is read
        again and must still hold the content that was validated (an :class:`InputError` naming the item if not)."""
        if isinstance(self.data, Image.Image):
            return self.data
        data = self._encoded()  # read outside the PIL guard: a changed file is its own error
        with _pil_errors(self.index, self.label, "could not be decoded", data):
            image = Image.open(io.BytesIO(data))
            image.load()
        return image

    def size(self) -> Tuple[int, int]:
        """(width, height) as the image's header states it, read without decoding the pixels (a file read again and
        checked as :meth:`open` checks it)."""
        if isinstance(self.data, Image.Image):
            return self.data.size
        data = self._encoded()
        with _pil_errors(self.index, self.label, "is not a readable image", data), \
                Image.open(io.BytesIO(data)) as image:
            return image.size

    def _encoded(self) -> bytes:
        """The encoded bytes of an image given as bytes or as a file (read again, and checked against its hash)."""
        if isinstance(self.data, bytes):
            return self.data
        assert isinstance(self.data, Path)
        data = _read_file(self.data, self.index)
        if _digest(b"file", data) != self.key:
            raise InputError(f"images[{self.index}] ({self.label}) changed after it was validated: the file no longer "
                             "holds the content that was read and hashed then; score it again")
        return data


@contextmanager
def _pil_errors(index: int, label: str, failure: str, data: bytes = b"") -> Iterator[None]:
    """Raise PIL's failures inside the block as an :class:`InputError` naming the image: decompression bombs
    (PIL's warning-sized images included) as too large, a video file (its encoded ``data``) as one to pass as a
    video, data of no format PIL reads as such, anything else as ``failure``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            yield
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
        raise InputError(
            f"images[{index}] ({label}) is too large to decode safely: {error} "
            "(raise PIL.Image.MAX_IMAGE_PIXELS to accept it)"
        ) from None
    except Image.UnidentifiedImageError:  # whose message names PIL's BytesIO, not the item
        container = video_container(data)
        if container is not None:
            raise InputError(f"images[{index}] ({label}) is a video ({container}), not an image; pass it with "
                             "videos= (--videos) to a video metric (EMScore, PAC-S)") from None
        raise InputError(f"images[{index}] ({label}) {failure}: not in any image format PIL reads") from None
    except Exception as error:  # PIL raises many types for corrupt data
        raise InputError(f"images[{index}] ({label}) {failure}: {error}") from None


_STILL_IMAGE_BRANDS = (b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"mif1", b"msf1", b"avif", b"avis")
"""ISO base media brands of still images (HEIF, AVIF), which share MP4's ``ftyp`` box."""


def video_container(data: bytes) -> Optional[str]:
    """The video container ``data`` starts as (``"MP4/QuickTime"``, ``"Matroska/WebM"``, ``"AVI"``,
    ``"MPEG program stream"``, ``"FLV"``, ``"ASF/WMV"``), read from its signature, or ``None``."""
    if data[4:8] == b"ftyp":
        return None if data[8:12] in _STILL_IMAGE_BRANDS else "MP4/QuickTime"
    if data[:4] == b"RIFF" and data[8:12] == b"AVI ":
        return "AVI"
    signatures = {b"\x1a\x45\xdf\xa3": "Matroska/WebM", b"\x00\x00\x01\xba": "MPEG program stream", b"FLV\x01": "FLV",
                  b"\x30\x26\xb2\x75": "ASF/WMV"}
    return signatures.get(data[:4])


def _check_header(data: bytes, index: int, label: str) -> None:
    """Parse the image header so that unreadable or oversized files fail before any model work."""
    with _pil_errors(index, label, "is not a readable image", data), Image.open(io.BytesIO(data)) as image:
        image.size  # noqa: B018 - the header parse is the check


def _read_file(path: Path, index: int) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"images[{index}]: file not found: {path}") from None
    except OSError as error:
        raise InputError(f"images[{index}]: cannot read {path}: {error}") from None


def file_key(path: Path, index: int) -> str:
    """The content hash of the image file ``path``, read and its header checked."""
    data = _read_file(path, index)
    _check_header(data, index, str(path))
    return _digest(b"file", data)


def validate_image(image: ImageInput, index: int) -> ImageItem:
    """Check one image input and wrap it with its content hash (a file keeps its path, not its bytes)."""
    if isinstance(image, (str, os.PathLike)):
        path = Path(image)
        return ImageItem(index, file_key(path, index), path, str(path))
    if isinstance(image, (bytes, bytearray)):
        data = bytes(image)
        _check_header(data, index, f"{len(data)} bytes")
        return ImageItem(index, _digest(b"file", data), data, f"{len(data)} bytes")
    if isinstance(image, Image.Image):
        width, height = image.size
        if width * height > (Image.MAX_IMAGE_PIXELS or float("inf")):
            raise InputError(f"images[{index}]: {width}x{height} exceeds PIL.Image.MAX_IMAGE_PIXELS")
        if width == 0 or height == 0:
            raise InputError(f"images[{index}]: empty image ({width}x{height})")
        label = f"PIL {image.mode} {width}x{height}"
        with _pil_errors(index, label, "cannot be read (a closed or unloadable PIL image)"):
            image.load()
            pixels = image.tobytes()
            palette = _palette_bytes(image)
        header = f"pil:{image.mode}:{width}x{height}".encode()
        return ImageItem(index, _digest(header, palette, pixels), image, label)
    if isinstance(image, np.ndarray):
        return validate_image(_array_to_pil(image, index), index)
    raise InputError(
        f"images[{index}] has type {type(image).__name__}; expected a path, PIL.Image, uint8 array or bytes"
    )


def _palette_bytes(image: Image.Image) -> bytes:
    """The RGB colours of the palette entries up to the highest index the pixels use (``b""`` without a palette).

    This is what ``convert("RGB")`` reads, taken in a form every supported Pillow gives alike: ``getpalette()``
    (``ImagePalette.tobytes`` refuses palettes still held as raw file data, and palette lengths past the used
    entries differ between formats and Pillow versions). Missing entries count as black.
    """
    if image.mode not in ("P", "PA"):
        return b""
    colours = image.getpalette() or []
    extrema = image.getextrema()
    highest = extrema[0][1] if image.mode == "PA" else extrema[1]
    used = 3 * (int(highest) + 1)
    return bytes(colours[:used]).ljust(used, b"\0")


def _array_to_pil(array: np.ndarray, index: int) -> Image.Image:
    if array.dtype != np.uint8:
        raise InputError(f"images[{index}]: arrays must be uint8 (HW or HWC), got dtype {array.dtype}")
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if array.ndim == 2:
        return Image.fromarray(np.ascontiguousarray(array), mode="L")
    if array.ndim == 3 and array.shape[2] in (3, 4):
        return Image.fromarray(np.ascontiguousarray(array), mode="RGB" if array.shape[2] == 3 else "RGBA")
    raise InputError(f"images[{index}]: expected an HW or HWC (C in 1, 3, 4) array, got shape {array.shape}")


def read_utf8(path: Union[str, "os.PathLike[str]"]) -> str:
    """The text of the file ``path`` (a leading byte order mark dropped), or an :class:`InputError` naming the file
    and the first byte that is not UTF-8 (its line and offset) where the file is in another encoding."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise InputError(f"{path} is not UTF-8 text: byte 0x{data[error.start]:02x} on line {line} (offset "
                         f"{error.start}); save it as UTF-8") from None


def float32_rows(rows: np.ndarray, where: str, row_name: str) -> np.ndarray:
    """Finite 2-D ``rows`` as C-contiguous float32, or an :class:`InputError` naming ``where`` and the first row whose
    squared norm does not fit float32 (such a row, a value of 1e300 or a few near 3.4e38, becomes infinite or NaN in
    the metrics' float32 arithmetic)."""
    with np.errstate(over="ignore"):  # an overflow is what is being looked for
        squares = np.square(rows.astype(np.float64)).sum(axis=1)
    too_large = ~(squares <= np.finfo(np.float32).max)
    if np.any(too_large):
        row = int(np.flatnonzero(too_large)[0])
        raise InputError(f"{where}: {row_name} {row} is too large for float32 arithmetic (its squared norm is "
                         f"{squares[row]:.3g}; float32 holds at most 3.4e38)")
    return np.ascontiguousarray(rows, dtype=np.float32)


_INVISIBLE = frozenset({"Cc", "Cf"})
"""Unicode categories of characters that show nothing: controls and format characters (zero-width space and
joiners, the byte order mark, direction marks)."""


def validate_caption(caption: object, where: str) -> str:
    """Check that a caption is a string of valid Unicode with some visible text; ``where`` names it in the error (e.g.
    ``candidates[3]``)."""
    if caption is None:
        raise InputError(f"{where} is None; every caption must be a non-empty string")
    if not isinstance(caption, str):
        raise InputError(f"{where} has type {type(caption).__name__}; captions must be strings")
    try:
        caption.encode("utf-8")
    except UnicodeEncodeError as error:  # lone surrogates, as decoding with errors="surrogateescape" leaves them
        raise InputError(f"{where} is not valid Unicode: {caption[error.start:error.end]!r} at character "
                         f"{error.start} cannot be encoded as UTF-8") from None
    if all(character.isspace() or unicodedata.category(character) in _INVISIBLE for character in caption):
        raise InputError(f"{where} is empty; every caption must contain text"
                         + ("" if not caption.strip() else " (it holds only invisible characters such as U+200B)"))
    return caption


def validate_references(references: object, index: int) -> Tuple[str, ...]:
    """Check one item's reference list: a non-empty sequence of non-blank strings."""
    if isinstance(references, str) or not isinstance(references, Sequence):
        raise InputError(
            f"references[{index}] must be a list of strings, got {type(references).__name__}"
        )
    if len(references) == 0:
        raise InputError(f"references[{index}] is empty; reference-based scores need at least one reference")
    return tuple(validate_caption(ref, f"references[{index}][{j}]") for j, ref in enumerate(references))


IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp"})
"""File extensions (any case) of the images read from a folder."""


def images_by_stem(folder: Path) -> Dict[str, List[Path]]:
    """The image files in ``folder`` (an extension in :data:`IMAGE_EXTENSIONS`) by file stem, the image id; the files
    of one stem are sorted by name (several of them are for the caller to refuse or not)."""
    return files_by_stem(folder, IMAGE_EXTENSIONS, "image")


def files_by_stem(folder: Path, extensions: AbstractSet[str], kind: str) -> Dict[str, List[Path]]:
    """The files in ``folder`` with one of ``extensions`` (lower case, any case on disk) by file stem, sorted by name
    within a stem; ``kind`` (``"image"``, ``"video"``) names the folder in the error when it does not exist."""
    if not folder.is_dir():
        raise InputError(f"{kind} folder not found: {folder}")
    found: Dict[str, List[Path]] = {}
    for path in sorted(folder.iterdir()):
        if path.suffix.lower() in extensions and path.is_file():
            found.setdefault(path.stem, []).append(path)
    return found


TextPosition = Tuple[int, Optional[int]]
"""(item index, reference number, or None for the candidate)."""


@dataclass(frozen=True)
class ScoringItems:
    """A validated chunk of (image, candidate, references) triples; ``start`` is the index of its first item.
    ``images`` holds :class:`ImageItem` objects, or what a scorer's own image-entry validator returns."""

    start: int
    images: Tuple[Any, ...]
    candidates: Tuple[str, ...]
    references: Optional[Tuple[Tuple[str, ...], ...]]

    def __len__(self) -> int:
        return len(self.candidates)

    def texts(self) -> Tuple[List[str], List[int]]:
        """Every candidate of the chunk, then every item's references, in one list (the order of
        :meth:`text_positions`), and the number of references of each item (empty without references)."""
        texts = list(self.candidates)
        counts: List[int] = []
        for refs in self.references or ():
            texts.extend(refs)
            counts.append(len(refs))
        return texts, counts

    def text_positions(self) -> List[TextPosition]:
        """(item index, reference number or None for the candidate) of each text in the order scorers encode them:
        every candidate of the chunk, then every item's references."""
        positions: List[TextPosition] = [(self.start + i, None) for i in range(len(self))]
        for i, refs in enumerate(self.references or ()):
            positions.extend((self.start + i, j) for j in range(len(refs)))
        return positions


class TruncationWarning(UserWarning):
    """Texts longer than the model's context were truncated as the reference code truncates them.

    ``positions`` lists every truncated text as (item index, reference number or None for the candidate), so that a
    caller can name the items its own way (:meth:`describe`); the message names them by index.
    """

    def __init__(self, positions: Sequence[TextPosition], context_length: int,
                 rule: str = "keeping the end token") -> None:
        self.positions = tuple(positions)
        self.context_length = context_length
        self.rule = rule
        super().__init__(self.describe())

    def describe(self, name: Optional[Callable[[TextPosition], str]] = None, shown: int = 3) -> str:
        """One line: the count, the first ``shown`` texts named by ``name`` (default ``candidates[i]`` /
        ``references[i][j]``) and what was done."""
        def by_index(position: TextPosition) -> str:
            index, reference = position
            return f"candidates[{index}]" if reference is None else f"references[{index}][{reference}]"

        names = [(name or by_index)(position) for position in self.positions[:shown]]
        more = f" and {len(self.positions) - shown} more" if len(self.positions) > shown else ""
        count = len(self.positions)
        texts_exceed = "1 text exceeds" if count == 1 else f"{count} texts exceed"
        return (f"{texts_exceed} the model's {self.context_length}-token context and {'was' if count == 1 else 'were'} "
                f"truncated, {self.rule}, as the reference implementation does: {', '.join(names)}{more}")


def check_not_single(name: str, values: object, expected: str) -> None:
    """Refuse one string, bytes or path given where a list is expected (it would be read item by item)."""
    if isinstance(values, (str, bytes, bytearray, os.PathLike)):
        raise InputError(f"{name} must be {expected}, got a single {type(values).__name__} ({_short(values)}); "
                         f"wrap one item in a list: {name}=[...]")


def _short(value: object, limit: int = 60) -> str:
    text = repr(os.fspath(value)) if isinstance(value, os.PathLike) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _sized(values: Iterable[object]) -> Optional[int]:
    return len(values) if hasattr(values, "__len__") else None  # type: ignore[arg-type]


def _check_lengths(images: Iterable[Any], candidates: Iterable[str],
                   references: Optional[Iterable[Sequence[str]]], entries: str = "images") -> None:
    """Refuse single values given for lists, and sized inputs that differ in length; ``entries`` names the visual
    input (``images``, ``videos``)."""
    check_not_single(entries, images, f"a list of {entries} (one per candidate)")
    check_not_single("candidates", candidates, "a list of strings")
    lengths = {entries: _sized(images), "candidates": _sized(candidates)}
    if references is not None:
        check_not_single("references", references, "a list of lists of strings")
        lengths["references"] = _sized(references)
    known = {name: n for name, n in lengths.items() if n is not None}
    if len(set(known.values())) > 1:
        raise InputError("inputs differ in length: " + ", ".join(f"{n} {name}" for name, n in known.items()))


_ENDED = object()
"""What :func:`_raw_chunk` reads from an input that has run out."""


def _raw_chunk(inputs: Tuple[Iterator[object], ...], start: int, chunk_size: int,
               entries: str = "images") -> List[Tuple[object, ...]]:
    """Up to ``chunk_size`` (image, candidate[, references]) tuples read in step from ``inputs`` (fewer at the end);
    an input that runs out before the others is an error."""
    raw: List[Tuple[object, ...]] = []
    while len(raw) < chunk_size:
        values = tuple(next(values_iter, _ENDED) for values_iter in inputs)
        ended = [name for name, value in zip((entries, "candidates", "references"), values) if value is _ENDED]
        if ended:
            if len(ended) < len(inputs):
                raise InputError(f"inputs differ in length: {', '.join(ended)} ended after {start + len(raw)} items")
            break
        raw.append(values)
    return raw


class _CheckedFile:
    """A path entry checked by :class:`FileChecks`: its outcome is the next of ``outcomes`` when it is first asked
    for (the entries are asked for in the order of ``outcomes``)."""

    def __init__(self, outcomes: Iterator[FileOutcome], path: Path, index: int) -> None:
        self._outcomes = outcomes
        self._path = path
        self._index = index
        self._item: Optional[ImageItem] = None

    def result(self) -> ImageItem:
        if self._item is None:
            outcome = next(self._outcomes)
            if isinstance(outcome, InputError):
                raise outcome
            self._item = ImageItem(self._index, outcome, self._path, str(self._path))
        return self._item

    def cancel(self) -> None:
        """Nothing to cancel: the check is given up when its outcomes are closed."""


def _started_validations(
    pool: ThreadPoolExecutor, entries: List[Tuple[int, object]], validate_image_entry: Callable[[Any, int], Any],
    file_checks: Optional["FileChecks"],
) -> Tuple[Dict[int, Any], Optional[Generator[FileOutcome, None, None]]]:
    """The validations of (item index, image entry) ``entries`` by index, each with ``result()`` and ``cancel()``:
    path entries checked by ``file_checks`` when given (and the generator of their outcomes, to close once the items
    are read), the others by ``validate_image_entry`` in ``pool``'s threads."""
    validated: Dict[int, Any] = {}
    outcomes = None
    if file_checks is not None:
        paths = {index: Path(entry) for index, entry in entries  # type: ignore[arg-type]  # str or os.PathLike
                 if isinstance(entry, (str, os.PathLike))}
        outcomes = file_checks.check([(str(path), index) for index, path in paths.items()])
        validated = {index: _CheckedFile(outcomes, path, index) for index, path in paths.items()}
    validated.update({index: pool.submit(validate_image_entry, entry, index)
                      for index, entry in entries if index not in validated})
    return validated, outcomes


def _validated_chunk(
    pool: ThreadPoolExecutor, raw: List[Tuple[object, ...]], start: int, with_references: bool,
    validate_image_entry: Callable[[Any, int], Any], file_checks: Optional["FileChecks"],
    captions_validated: bool = False,
) -> ScoringItems:
    """The items of ``raw`` validated: image entries in ``pool``'s threads (file reads and hashing release the GIL),
    or file paths by ``file_checks``' processes when given; errors raised in item order, each item's image before its
    texts; equal images given as bytes or PIL images share one copy of their data. With ``captions_validated`` the
    captions are taken as they are (see :func:`iter_scoring_items`).

    A file path that recurs in the chunk (an image scored against each of its candidates) is read, checked and hashed
    once: its later items take the first one's validated entry at their own index."""
    first_position: Dict[str, int] = {}
    sources: List[int] = []  # the position whose validation each item takes
    for position, values in enumerate(raw):
        entry = values[0]
        is_path = isinstance(entry, (str, os.PathLike))
        sources.append(first_position.setdefault(os.fspath(entry), position) if is_path else position)
    last_use = {source: position for position, source in enumerate(sources)}
    distinct = [position for position, source in enumerate(sources) if source == position]
    validated, outcomes = _started_validations(pool, [(start + position, raw[position][0]) for position in distinct],
                                               validate_image_entry, file_checks)
    validated = {position: validated[start + position] for position in distinct}
    chunk_images: List[Any] = []
    chunk_data: Dict[str, Union[bytes, Image.Image]] = {}  # one copy of each distinct image given in memory
    chunk_captions: List[str] = []
    chunk_refs: List[Tuple[str, ...]] = []
    try:
        for position, values in enumerate(raw):
            index = start + position
            source = sources[position]
            item = validated[source].result()
            if last_use[source] == position:
                del validated[source]  # keep one copy of each distinct image's bytes, not one per item
            changes: Dict[str, Any] = {"index": index} if source != position else {}
            if (isinstance(item, ImageItem) and not isinstance(item.data, Path)
                    and (shared := chunk_data.setdefault(item.key, item.data)) is not item.data):
                changes["data"] = shared
            if changes:
                item = replace(item, **changes)
            chunk_images.append(item)
            caption, refs = values[1], values[2] if with_references else None
            if not captions_validated:
                caption = validate_caption(caption, f"candidates[{index}]")
                refs = validate_references(refs, index) if with_references else None
            chunk_captions.append(caption)  # type: ignore[arg-type]
            if with_references:
                chunk_refs.append(refs)  # type: ignore[arg-type]
    finally:
        for future in validated.values():
            future.cancel()
        if outcomes is not None:
            outcomes.close()
    return ScoringItems(start, tuple(chunk_images), tuple(chunk_captions),
                        tuple(chunk_refs) if with_references else None)


def iter_scoring_items(
    images: Iterable[ImageInput],
    candidates: Iterable[str],
    references: Optional[Iterable[Sequence[str]]] = None,
    chunk_size: int = 1024,
    *,
    validate_image_entry: Callable[[Any, int], Any] = validate_image,
    entries: str = "images",
    captions_validated: bool = False,
    file_checks: Optional["FileChecks"] = None,
) -> Iterator[ScoringItems]:
    """Validate inputs lazily in chunks of ``chunk_size`` items; iterables are consumed once, in step.

    Each image entry goes through ``validate_image_entry(entry, index)`` (default :func:`validate_image`; a scorer
    that also takes other entries, such as precomputed region features, passes its own; ``entries`` names them in
    errors, ``videos`` for a video metric). With ``file_checks``, path entries are checked in its processes as
    :func:`validate_image` checks them, instead of by ``validate_image_entry`` (for validators that take a path as an
    image file). Within a chunk, equal images given as bytes or PIL images share one copy of their data.
    ``captions_validated``: the candidates are the strings :func:`validate_caption` returned and the references the
    tuples :func:`validate_references` returned (a scorer that reads the captions whole first, for a table over all
    of them, validates them there), taken as they are.

    Raises :class:`InputError` when the inputs differ in length (checked up front for sized inputs, otherwise when
    the shorter one runs out) or when any item is invalid.
    """
    _check_lengths(images, candidates, references, entries)
    inputs = (iter(images), iter(candidates), *(() if references is None else (iter(references),)))
    start = 0
    workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="capeval-validation") as pool:
        while True:
            raw = _raw_chunk(inputs, start, chunk_size, entries)
            count = len(raw)
            if count:
                chunk = _validated_chunk(pool, raw, start, references is not None, validate_image_entry, file_checks,
                                         captions_validated)
                del raw  # the caller's entries; the chunk holds what scoring needs
                yield chunk
                start += count
            if count < chunk_size:
                if start == 0:
                    raise InputError(f"no items to score: {entries} and candidates are empty")
                return

"""What every benchmark loader shares: the item types, :class:`Benchmark`, the :class:`BenchmarkSpec` a loader builds
it from, and the readers of the published files.

Texts of the image benchmarks are whitespace-normalised (``" ".join(text.split())``) as the CLIPScore and PAC-S
evaluation scripts do; nothing else is changed (the video benchmarks keep their texts as released, as the EMScore
demos do). Images are named relative to an images folder; :func:`check_images` fails early on missing files. Video
benchmarks name their videos by id and say in :class:`VideoSetup` where the feature files are and how the metrics
read them. The readers raise :class:`BenchmarkFormatError` naming the file, the entry and the problem; pickles are
read by :func:`read_pickle`, which executes nothing.
"""
from __future__ import annotations

import json
import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from capeval.inputs import InputError, read_utf8

PathLike = Union[str, "os.PathLike[str]"]

TASKS = ("correlation", "pairwise", "foil", "video_correlation", "video_foil")


@dataclass(frozen=True)
class RatedItem:
    """One human rating of one candidate caption (correlation benchmarks)."""

    image: str
    candidate: str
    references: Tuple[str, ...]
    human: float
    key: str


@dataclass(frozen=True)
class PairwiseItem:
    """Two candidate captions of one image and the index of the one humans preferred (PASCAL-50S)."""

    image: str
    candidates: Tuple[str, str]
    references: Tuple[str, ...]
    label: int
    category: str
    key: str


@dataclass(frozen=True)
class FoilItem:
    """A correct or a foil caption of one image; the correct and the foil caption of one pair share ``pair``."""

    image: str
    candidate: str
    references: Tuple[str, ...]
    is_foil: bool
    key: str
    pair: str = ""


@dataclass(frozen=True)
class RatedVideoItem:
    """One candidate caption of one video with the scores of several human raters (VATEX-EVAL)."""

    video: str
    candidate: str
    references: Tuple[str, ...]
    human: Tuple[float, ...]
    key: str


@dataclass(frozen=True)
class ParagraphItem:
    """A paragraph describing one video, one sentence per segment (ActivityNet-FOIL): the correct paragraph or its
    foil. ``timestamps[i]`` is sentence ``i``'s segment in seconds of the video's ``duration``, ``references[i]`` its
    references; the correct and the foil paragraph of a video share ``video``."""

    video: str
    sentences: Tuple[str, ...]
    timestamps: Tuple[Tuple[float, float], ...]
    references: Tuple[Tuple[str, ...], ...]
    duration: float
    is_foil: bool
    key: str


@dataclass(frozen=True)
class VideoSetup:
    """How the metrics of a video benchmark read its videos: the folder of the ``<video id>.pt`` frame feature files,
    the frames kept of each (``num_frames``: sampled as VATEX-EVAL-demo.py samples them; ``None``: all), and the
    sentences the IDF weights are counted over."""

    features_dir: str
    num_frames: Optional[int]
    idf_corpus: Tuple[str, ...] = field(repr=False)


def feature_file(folder: PathLike, video: str) -> Path:
    """The frame feature file of video ``video`` in ``folder``: ``<video id>.pt``, as the EMScore demos name them."""
    return Path(folder) / f"{video}.pt"


def feature_files(folder: Path) -> Dict[str, Path]:
    """Every ``<video id>.pt`` file of ``folder`` by video id (the EMScore demos glob ``*.pt`` and strip ``.pt``)."""
    if not folder.is_dir():
        raise FileNotFoundError(f"the folder of the video feature files {str(folder)!r} does not exist")
    return {path.name[: -len(".pt")]: path for path in sorted(folder.glob("*.pt"))}


@dataclass(frozen=True)
class Benchmark:
    """A loaded benchmark: its items, the exact protocol they follow and the statistics to report.

    ``statistics`` lists every statistic the protocol reports, primary first (names: ``kendall_tau_c``,
    ``kendall_tau_b``, ``spearman``, ``pearson``, ``accuracy``). ``image_dir`` is the images folder the loader knows
    of (images extracted from a hub dataset), or ``""`` when the user must give one; a video benchmark has
    ``video`` instead. ``ties`` is the credit of a tie between the two captions of a pair that the protocol gives
    (pairwise and FOIL tasks).
    """

    name: str
    task: str
    items: tuple
    protocol: str
    primary_statistic: str
    statistics: Tuple[str, ...] = ()
    source: str = ""
    citation: str = ""
    image_dir: str = ""
    video: Optional[VideoSetup] = None
    ties: str = "half"

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise InputError(f"benchmark {self.name!r}: task must be one of {', '.join(TASKS)}, not {self.task!r}")

    def images(self) -> List[str]:
        """Unique image names in first-seen order."""
        return list(dict.fromkeys(item.image for item in self.items))


class BenchmarkFormatError(InputError):
    """A benchmark file does not have the published layout; the message names the file, the entry and the problem."""


class ItemsRead(NamedTuple):
    """Items read from one of a benchmark's layouts: ``source`` names the layout and its files, ``description`` says
    for the protocol how they were read, ``image_dir`` is the images folder it implies (``""``: the user gives one)."""

    items: List[Any]
    source: str
    description: str
    image_dir: str = ""


@dataclass(frozen=True)
class BenchmarkSpec:
    """What every load of one benchmark shares: its task, the statistics it reports (primary first), the layouts
    ``source`` may name (``"auto"`` first), how to get its files, its citation and the credit of a tie its protocol
    gives."""

    name: str
    task: str
    statistics: Tuple[str, ...]
    sources: Tuple[str, ...]
    how_to_get: str
    citation: str
    ties: str = "half"

    def check_source(self, source: str) -> None:
        """Raise InputError unless ``source`` is one of :attr:`sources`."""
        if source not in self.sources:
            quoted = [repr(name) for name in self.sources]
            allowed = f"{', '.join(quoted[:-1])} or {quoted[-1]}"
            raise InputError(f"benchmark {self.name!r}: source must be {allowed}, not {source!r}")

    def folder(self, root: Optional[PathLike]) -> Path:
        """``root`` as the folder holding a release's files (FileNotFoundError when it is not one)."""
        if root is None or not Path(root).is_dir():
            given = "needs root=<folder>" if root is None else f"root={str(root)!r} is not a folder"
            raise FileNotFoundError(f"benchmark {self.name!r}: {given}; it reads the folder of its release. "
                                    f"{self.how_to_get}")
        return Path(root)

    def locate(self, root: Optional[PathLike], file_names: Sequence[str]) -> Path:
        """``root`` itself when it is a file, else the first of ``file_names`` inside the folder ``root``."""
        if root is None:
            raise FileNotFoundError(
                f"benchmark {self.name!r} needs root=<folder> (a folder holding {' or '.join(file_names)}). "
                f"{self.how_to_get}"
            )
        path = Path(root)
        if path.is_file():
            return path
        for name in file_names:
            if (path / name).is_file():
                return path / name
        raise FileNotFoundError(
            f"{' or '.join(file_names)} not found in {str(path)!r} for benchmark {self.name!r}. {self.how_to_get}"
        )

    def build(self, items: Sequence[Any], protocol: str, source: str, image_dir: str = "",
              video: Optional[VideoSetup] = None) -> Benchmark:
        """The :class:`Benchmark` of ``items`` read from ``source`` following ``protocol``."""
        return Benchmark(
            name=self.name,
            task=self.task,
            items=tuple(items),
            protocol=protocol,
            primary_statistic=self.statistics[0],
            statistics=self.statistics,
            source=source,
            citation=self.citation,
            image_dir=image_dir,
            video=video,
            ties=self.ties,
        )


def normalize_whitespace(text: str) -> str:
    """Collapse every run of whitespace to one space and strip the ends, as the reference evaluation scripts do."""
    return " ".join(text.split())


def check_images(benchmark: Benchmark, image_dir: Optional[PathLike] = None, *, shown: int = 5) -> None:
    """Raise FileNotFoundError naming the first ``shown`` missing images and how many are missing in all."""
    folder = image_dir if image_dir is not None else benchmark.image_dir
    if not folder:
        raise FileNotFoundError(f"benchmark {benchmark.name!r} needs an images folder: pass image_dir=<folder>")
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"images folder {str(folder)!r} for benchmark {benchmark.name!r} does not exist")
    names = benchmark.images()
    missing = [name for name in names if not (folder / name).is_file()]
    if missing:
        listed = ", ".join(missing[:shown]) + (", ..." if len(missing) > shown else "")
        raise FileNotFoundError(
            f"{len(missing)} of the {len(names)} images of benchmark {benchmark.name!r} are missing from "
            f"{str(folder)!r}: {listed}"
        )


# ----------------------------------------------------------------------------------------------------------------
# File readers


def read_json(path: Path) -> Any:
    """The JSON value of ``path``."""
    try:
        return json.loads(read_utf8(path))
    except json.JSONDecodeError as error:
        raise BenchmarkFormatError(f"{path}: not valid JSON ({error})") from None


def read_jsonl(path: Path) -> List[Dict[str, Any]]:
    """The JSON value of every non-blank line of ``path``."""
    rows = []
    for line_number, line in enumerate(read_utf8(path).split("\n"), 1):  # not splitlines: JSON may hold U+2028
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as error:
            raise BenchmarkFormatError(f"{path}:{line_number}: not valid JSON ({error})") from None
    return rows


def tab_rows(path: Path, columns: int) -> Iterator[Tuple[int, List[str]]]:
    """``(line number, fields)`` of a tab-separated file whose lines have exactly ``columns`` fields."""
    for line_number, line in enumerate(read_utf8(path).split("\n"), 1):
        line = line.strip()
        if not line:
            continue
        fields = line.split("\t")
        if len(fields) != columns:
            raise BenchmarkFormatError(
                f"{path}:{line_number}: expected {columns} tab-separated fields, found {len(fields)}"
            )
        yield line_number, fields


def coco_references(path: Path) -> Dict[str, List[str]]:
    """References per COCO val2014 file name (``COCO_val2014_<12-digit id>.jpg``) from captions_val2014.json."""
    data = read_json(path)
    names = {image["id"]: image["file_name"] for image in data.get("images", [])}
    references: Dict[str, List[str]] = {}
    for annotation in data.get("annotations", []):
        name = names.get(annotation["image_id"], f"COCO_val2014_{annotation['image_id']:012d}.jpg")
        references.setdefault(name, []).append(annotation["caption"])
    return references


def as_number(value: Any, where: str) -> float:
    """``value`` as a float; ``where`` names the entry in the error."""
    try:
        return float(value)
    except (TypeError, ValueError):
        raise BenchmarkFormatError(f"{where}: {value!r} is not a number") from None


def as_caption(value: Any, where: str) -> str:
    """``value`` as a whitespace-normalised caption; ``where`` names the entry in the error."""
    if not isinstance(value, str):
        raise BenchmarkFormatError(f"{where}: expected a caption string, found {type(value).__name__}")
    return normalize_whitespace(value)


def as_references(values: Any, where: str) -> Tuple[str, ...]:
    """``values`` as a non-empty tuple of whitespace-normalised captions; ``where`` names the entry in the error."""
    if not isinstance(values, (list, tuple)) or not values:
        raise BenchmarkFormatError(f"{where}: expected a non-empty list of reference captions")
    return tuple(as_caption(value, f"{where}[{index}]") for index, value in enumerate(values))


def _numpy_pickle_globals() -> Dict[Tuple[str, str], Any]:
    """The globals a pickle of numpy arrays and numpy scalars names (``_reconstruct``, ``_frombuffer`` for protocol 5,
    ``scalar``, ``ndarray``, ``dtype``), under the module names numpy 1 and numpy 2 write, each mapped to the
    function this numpy rebuilds them with."""
    reconstruct = np.zeros(1).__reduce__()[0]
    frombuffer = np.zeros(1).__reduce_ex__(5)[0]
    scalar = np.float64(0).__reduce__()[0]
    admitted: Dict[Tuple[str, str], Any] = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype}
    for package in ("numpy.core", "numpy._core"):
        admitted[(f"{package}.multiarray", "_reconstruct")] = reconstruct
        admitted[(f"{package}.multiarray", "scalar")] = scalar
        admitted[(f"{package}.numeric", "_frombuffer")] = frombuffer
    return admitted


_PICKLE_GLOBALS = _numpy_pickle_globals()


class _ReleaseUnpickler(pickle.Unpickler):
    """Rebuilds numpy arrays, numpy scalars and plain values (lists, tuples, dicts, strings, numbers) and nothing
    else: any other global a pickle names is refused when it is looked up, before anything could call it."""

    def __init__(self, handle: Any, path: Path) -> None:
        super().__init__(handle)
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        admitted = _PICKLE_GLOBALS.get((module, name))
        if admitted is None:
            raise InputError(
                f"{self.path}: refused to load the pickled global {module}.{name}; a benchmark pickle may hold only "
                "numpy arrays, lists, strings and numbers, and nothing in it is executed"
            )
        return admitted


def read_pickle(path: Path) -> Any:
    """The value pickled in ``path``, read by an unpickler that admits only numpy arrays and plain values: an
    :class:`InputError` names the file and any other global it names, which is never called."""
    try:
        with open(path, "rb") as handle:
            return _ReleaseUnpickler(handle, path).load()
    except InputError:
        raise
    except Exception as error:  # truncated or corrupt data: pickle and numpy raise many kinds
        raise BenchmarkFormatError(f"{path}: not a readable pickle ({type(error).__name__}: {error})") from None


def as_text_list(value: Any, where: str) -> List[str]:
    """``value`` (a numpy array, as ``.tolist()`` reads it, or a list) as a list of strings, kept as released;
    ``where`` names the file in the error."""
    values = value.tolist() if isinstance(value, np.ndarray) else value
    if not isinstance(values, list):
        raise BenchmarkFormatError(f"{where}: expected an array or list of strings, found {type(value).__name__}")
    for index, text in enumerate(values):
        if not isinstance(text, str):
            raise BenchmarkFormatError(f"{where}[{index}]: expected a string, found {type(text).__name__}")
    return values

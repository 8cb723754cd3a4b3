"""Human-judgment benchmarks for caption metrics: data model, loaders and the exact protocol each one follows.

Every loader reads a published file layout (the original release, or the layout the reference evaluation code reads)
and returns a :class:`Benchmark` whose ``protocol`` says exactly what was kept, dropped and flattened. Texts are
whitespace-normalised (``" ".join(text.split())``) as the CLIPScore and PAC-S evaluation scripts do; nothing else
is changed. Images are named relative to an images folder; :func:`check_images` fails early on missing files.
"""
from __future__ import annotations

import ast
import csv
import hashlib
import inspect
import json
import math
import os
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from capeval.inputs import InputError

PathLike = Union[str, "os.PathLike[str]"]

TASKS = ("correlation", "pairwise", "foil")
PASCAL_CATEGORIES = ("HC", "HI", "HM", "MM")


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
class Benchmark:
    """A loaded benchmark: its items, the exact protocol they follow and the statistics to report.

    ``statistics`` lists every statistic the protocol reports, primary first (names: ``kendall_tau_c``,
    ``kendall_tau_b``, ``pearson``, ``accuracy``). ``image_dir`` is the images folder the loader knows of (images
    extracted from a hub dataset), or ``""`` when the user must give one.
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

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise InputError(f"benchmark {self.name!r}: task must be one of {', '.join(TASKS)}, not {self.task!r}")

    def images(self) -> List[str]:
        """Unique image names in first-seen order."""
        return list(dict.fromkeys(item.image for item in self.items))


class BenchmarkFormatError(ValueError):
    """A benchmark file does not have the published layout; the message names the file, the entry and the problem."""


def normalize_whitespace(text: str) -> str:
    """Collapse every run of whitespace to one space and strip the ends, as the reference evaluation scripts do."""
    return " ".join(text.split())


def check_images(benchmark: Benchmark, image_dir: Optional[PathLike] = None, *, shown: int = 5) -> None:
    """Raise FileNotFoundError naming the first ``shown`` missing images and how many are missing in all."""
    folder = image_dir if image_dir is not None else benchmark.image_dir
    if not folder:
        raise FileNotFoundError(f"benchmark {benchmark.name!r} needs an images folder: pass image_dir")
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
# File helpers


def _locate(root: Optional[PathLike], file_names: Sequence[str], benchmark: str, how_to_get: str) -> Path:
    """``root`` itself when it is a file, else the first of ``file_names`` inside the folder ``root``."""
    if root is None:
        raise FileNotFoundError(
            f"benchmark {benchmark!r} needs root= (a folder holding {' or '.join(file_names)}). {how_to_get}"
        )
    path = Path(root)
    if path.is_file():
        return path
    for name in file_names:
        if (path / name).is_file():
            return path / name
    raise FileNotFoundError(
        f"{' or '.join(file_names)} not found in {str(path)!r} for benchmark {benchmark!r}. {how_to_get}"
    )


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except json.JSONDecodeError as error:
        raise BenchmarkFormatError(f"{path}: not valid JSON ({error})") from None


def _read_jsonl(path: Path) -> List[Dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise BenchmarkFormatError(f"{path}:{line_number}: not valid JSON ({error})") from None
    return rows


def _tab_rows(path: Path, columns: int) -> Iterator[Tuple[int, List[str]]]:
    """``(line number, fields)`` of a tab-separated file whose lines have exactly ``columns`` fields."""
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, 1):
            line = line.strip()
            if not line:
                continue
            fields = line.split("\t")
            if len(fields) != columns:
                raise BenchmarkFormatError(
                    f"{path}:{line_number}: expected {columns} tab-separated fields, found {len(fields)}"
                )
            yield line_number, fields


def _number(value: Any, where: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise BenchmarkFormatError(f"{where}: {value!r} is not a number") from None


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise BenchmarkFormatError(f"{where}: expected a caption string, found {type(value).__name__}")
    return normalize_whitespace(value)


def _texts(values: Any, where: str) -> Tuple[str, ...]:
    if not isinstance(values, (list, tuple)) or not values:
        raise BenchmarkFormatError(f"{where}: expected a non-empty list of reference captions")
    return tuple(_text(value, f"{where}[{index}]") for index, value in enumerate(values))


# ----------------------------------------------------------------------------------------------------------------
# Flickr8k (Hodosh et al., 2013)

_FLICKR8K_HOW = (
    "Get Flickr8k_text.zip (ExpertAnnotations.txt, CrowdFlowerAnnotations.txt, Flickr8k.token.txt) from the "
    "Flickr8k release, or build flickr8k.json / crowdflower_flickr8k.json with jmhessel/clipscore's "
    "flickr8k_example/download.py."
)
_FLICKR8K_CITATION = (
    "Hodosh, Young and Hockenmaier (2013), Framing Image Description as a Ranking Task: Data, Models and "
    "Evaluation Metrics, JAIR 47."
)


def _flickr8k_references(token_file: Path) -> Tuple[Dict[str, List[str]], Dict[str, str]]:
    """Reference lists per image file name (file order) and the caption of every ``image#k`` caption id."""
    references: Dict[str, List[str]] = {}
    captions: Dict[str, str] = {}
    for line_number, (caption_id, caption) in _tab_rows(token_file, 2):
        image, separator, _ = caption_id.partition("#")
        if not separator:
            raise BenchmarkFormatError(f"{token_file}:{line_number}: caption id {caption_id!r} is not image#k")
        references.setdefault(image, []).append(caption)
        captions[caption_id] = caption
    return references, captions


def _caption_of(captions: Dict[str, str], caption_id: str, where: str) -> str:
    if caption_id not in captions:
        raise BenchmarkFormatError(f"{where}: caption id {caption_id!r} is not in Flickr8k.token.txt")
    return captions[caption_id]


def _expert_from_text(root: Path) -> Tuple[List[RatedItem], int]:
    """Items (grouped by image, first-seen order) and the number of candidates skipped as one of their references."""
    references, captions = _flickr8k_references(root / "Flickr8k.token.txt")
    annotations = root / "ExpertAnnotations.txt"
    groups: "OrderedDict[str, List[RatedItem]]" = OrderedDict()
    skipped = 0
    for line_number, (image, caption_id, *ratings) in _tab_rows(annotations, 5):
        where = f"{annotations}:{line_number}"
        caption = _caption_of(captions, caption_id, where)
        image_references = references.get(image)
        if image_references is None:
            raise BenchmarkFormatError(f"{where}: image {image!r} has no references in Flickr8k.token.txt")
        if caption in image_references:
            skipped += 1
            continue
        normalized_references = tuple(normalize_whitespace(reference) for reference in image_references)
        for rater, rating in enumerate(ratings, 1):
            groups.setdefault(image, []).append(
                RatedItem(
                    image=image,
                    candidate=normalize_whitespace(caption),
                    references=normalized_references,
                    human=_number(rating, f"{where} (expert {rater})"),
                    key=f"{image}#{caption_id}#{rater}",
                )
            )
    return [item for group in groups.values() for item in group], skipped


def _crowdflower_from_text(root: Path) -> Tuple[List[RatedItem], int]:
    """Items (grouped by image, first-seen order) and how many reference captions were removed in all."""
    references, captions = _flickr8k_references(root / "Flickr8k.token.txt")
    annotations = root / "CrowdFlowerAnnotations.txt"
    rows = []
    remaining: "OrderedDict[str, List[str]]" = OrderedDict()
    removed = 0
    for line_number, (image, caption_id, fraction_yes, _, _) in _tab_rows(annotations, 5):
        where = f"{annotations}:{line_number}"
        caption = _caption_of(captions, caption_id, where)
        if image not in remaining:
            if image not in references:
                raise BenchmarkFormatError(f"{where}: image {image!r} has no references in Flickr8k.token.txt")
            remaining[image] = list(references[image])
        # One reference list per image, shared by all of its candidates: each judged candidate text removes the
        # first reference equal to it (a text listed twice among the references loses one copy per candidate).
        if caption in remaining[image]:
            remaining[image].remove(caption)
            removed += 1
        rows.append((image, caption_id, caption, _number(fraction_yes, f"{where} (fraction of yes)")))
    groups: "OrderedDict[str, List[RatedItem]]" = OrderedDict((image, []) for image in remaining)
    for image, caption_id, caption, fraction_yes in rows:
        if not remaining[image]:
            raise BenchmarkFormatError(f"{annotations}: image {image!r} has no reference left after the removal")
        groups[image].append(
            RatedItem(
                image=image,
                candidate=normalize_whitespace(caption),
                references=tuple(normalize_whitespace(reference) for reference in remaining[image]),
                human=fraction_yes,
                key=f"{image}#{caption_id}",
            )
        )
    return [item for group in groups.values() for item in group], removed


def _flickr8k_from_json(path: Path) -> Tuple[List[RatedItem], int]:
    """Items of a clipscore ``download.py`` json (image order of the file) and the number of NaN ratings dropped."""
    data = _read_json(path)
    if not isinstance(data, dict):
        raise BenchmarkFormatError(f"{path}: expected an object keyed by image id")
    items: List[RatedItem] = []
    dropped = 0
    for image_key, entry in data.items():
        where = f"{path} [{image_key!r}]"
        try:
            image = os.path.basename(entry["image_path"])
            references = _texts(entry["ground_truth"], f"{where}['ground_truth']")
            judgements = entry["human_judgement"]
        except (KeyError, TypeError) as error:
            raise BenchmarkFormatError(
                f"{where}: needs 'image_path', 'ground_truth' and 'human_judgement' ({error!r})"
            ) from None
        for index, judgement in enumerate(judgements):
            entry_where = f"{where}['human_judgement'][{index}]"
            if not isinstance(judgement, dict) or "caption" not in judgement or "rating" not in judgement:
                raise BenchmarkFormatError(f"{entry_where}: needs 'caption' and 'rating'")
            rating = _number(judgement["rating"], entry_where)
            if math.isnan(rating):
                dropped += 1
                continue
            items.append(
                RatedItem(
                    image=image,
                    candidate=_text(judgement["caption"], entry_where),
                    references=references,
                    human=rating,
                    key=f"{image}#{index}",
                )
            )
    return items, dropped


def _flickr8k_source(
    root: Optional[PathLike], source: str, text_file: str, json_file: str, name: str
) -> Tuple[str, Path]:
    """Resolve ``source`` ("auto", "text" or "json") to the source used and its path."""
    if source not in ("auto", "text", "json"):
        raise InputError(f"benchmark {name!r}: source must be 'auto', 'text' or 'json', not {source!r}")
    if root is None:
        raise FileNotFoundError(
            f"benchmark {name!r} needs root= (the Flickr8k text folder or {json_file}). {_FLICKR8K_HOW}"
        )
    path = Path(root)
    if source in ("auto", "text") and path.is_dir() and (path / text_file).is_file():
        if not (path / "Flickr8k.token.txt").is_file():
            raise FileNotFoundError(f"Flickr8k.token.txt not found in {str(path)!r}. {_FLICKR8K_HOW}")
        return "text", path
    if source == "text":
        raise FileNotFoundError(f"{text_file} not found in {str(path)!r}. {_FLICKR8K_HOW}")
    return "json", _locate(path, [json_file], name, _FLICKR8K_HOW)


def _load_flickr8k_expert(root: Optional[PathLike], source: str) -> Benchmark:
    used, path = _flickr8k_source(root, source, "ExpertAnnotations.txt", "flickr8k.json", "flickr8k-expert")
    if used == "text":
        items, skipped = _expert_from_text(path)
        what = (
            f"read from ExpertAnnotations.txt and Flickr8k.token.txt in {path}; {skipped} (image, candidate) pairs "
            "whose candidate text equals one of that image's references were dropped"
        )
    else:
        items, dropped = _flickr8k_from_json(path)
        what = f"read from the clipscore download.py json {path} ({dropped} NaN ratings dropped)"
    protocol = (
        f"Flickr8k-Expert (Hodosh et al., 2013) as CLIPScore and PAC-S evaluate it: {what}. Each remaining "
        "(image, candidate) pair appears once per expert rating (three experts, ratings 1-4), flattened to "
        f"{len(items)} items (16,992 for the full release); human score = that rating. References = all five "
        "Flickr8k captions of the image. Texts whitespace-normalised. Report Kendall tau-c (primary) and tau-b "
        "of scipy.stats.kendalltau(metric, human) x 100."
    )
    return Benchmark(
        name="flickr8k-expert",
        task="correlation",
        items=tuple(items),
        protocol=protocol,
        primary_statistic="kendall_tau_c",
        statistics=("kendall_tau_c", "kendall_tau_b"),
        source=f"{used}:{path}",
        citation=_FLICKR8K_CITATION,
    )


def _load_flickr8k_cf(root: Optional[PathLike], source: str) -> Benchmark:
    used, path = _flickr8k_source(
        root, source, "CrowdFlowerAnnotations.txt", "crowdflower_flickr8k.json", "flickr8k-cf"
    )
    if used == "text":
        items, removed = _crowdflower_from_text(path)
        what = (
            f"read from CrowdFlowerAnnotations.txt and Flickr8k.token.txt in {path}; every row is kept; each image "
            "has ONE reference list, its Flickr8k captions minus, for every judged candidate of that image (file "
            "order), the first reference whose text equals the candidate text "
            f"({removed} references removed), as clipscore's download.py builds crowdflower_flickr8k.json"
        )
    else:
        items, dropped = _flickr8k_from_json(path)
        what = f"read from the clipscore download.py json {path} ({dropped} NaN ratings dropped)"
    protocol = (
        f"Flickr8k-CF (Hodosh et al., 2013) as CLIPScore and PAC-S evaluate it: {what}. Human score = fraction of "
        f"'yes' votes; {len(items)} items (47,830 for the full release). Texts whitespace-normalised. Report "
        "Kendall tau-b (primary, following Cui et al. 2018 and CLIPScore) and tau-c of "
        "scipy.stats.kendalltau(metric, human) x 100."
    )
    return Benchmark(
        name="flickr8k-cf",
        task="correlation",
        items=tuple(items),
        protocol=protocol,
        primary_statistic="kendall_tau_b",
        statistics=("kendall_tau_b", "kendall_tau_c"),
        source=f"{used}:{path}",
        citation=_FLICKR8K_CITATION,
    )


# ----------------------------------------------------------------------------------------------------------------
# PASCAL-50S (Vedantam et al., 2015)

_PASCAL_HOW = (
    "pascal_50s.json: {'HC'|'HI'|'HM'|'MM': [{'image', 'captions': [A, B], 'label', 'references'}]}; images are "
    "the PASCAL VOC JPEGImages."
)


def _load_pascal50s(root: Optional[PathLike], source: str, references: Optional[int] = None) -> Benchmark:
    if source not in ("auto", "json"):
        raise InputError(f"benchmark 'pascal-50s': source must be 'auto' or 'json', not {source!r}")
    path = _locate(root, ["pascal_50s.json"], "pascal-50s", _PASCAL_HOW)
    data = _read_json(path)
    if not isinstance(data, dict) or set(data) - set(PASCAL_CATEGORIES):
        raise BenchmarkFormatError(f"{path}: expected an object with the categories {', '.join(PASCAL_CATEGORIES)}")
    if references is not None and references < 1:
        raise InputError(f"benchmark 'pascal-50s': references must be at least 1, not {references}")
    items = []
    for category in PASCAL_CATEGORIES:
        for index, entry in enumerate(data.get(category, [])):
            where = f"{path} [{category!r}][{index}]"
            if not isinstance(entry, dict) or not {"image", "captions", "label", "references"} <= set(entry):
                raise BenchmarkFormatError(f"{where}: needs 'image', 'captions', 'label' and 'references'")
            captions = entry["captions"]
            if not isinstance(captions, list) or len(captions) != 2:
                raise BenchmarkFormatError(f"{where}: 'captions' must hold exactly two captions")
            if entry["label"] not in (0, 1) or isinstance(entry["label"], bool):
                raise BenchmarkFormatError(f"{where}: 'label' must be 0 or 1, found {entry['label']!r}")
            item_references = _texts(entry["references"], f"{where}['references']")
            if references is not None:
                if len(item_references) < references:
                    raise BenchmarkFormatError(f"{where}: has {len(item_references)} references, {references} asked")
                item_references = item_references[:references]
            items.append(
                PairwiseItem(
                    image=os.path.basename(entry["image"]),
                    candidates=(
                        _text(captions[0], f"{where}['captions'][0]"), _text(captions[1], f"{where}['captions'][1]")
                    ),
                    references=item_references,
                    label=int(entry["label"]),
                    category=category,
                    key=f"{category}#{index}",
                )
            )
    counts = sorted({len(item.references) for item in items})
    kept = "all references of each pair as listed" if references is None else f"the first {references} of each pair"
    kept += f" ({' or '.join(map(str, counts))} per pair, one fixed set; the papers average 5 draws of 5 of the 48)"
    protocol = (
        f"PASCAL-50S (Vedantam et al., 2015) from {path}: {len(items)} caption pairs in categories HC (two correct "
        "human captions), HI (human correct vs human incorrect), HM (human vs machine), MM (two machine captions); "
        "label = the caption preferred by the majority of the 48 human judgments (as stored in the file); "
        f"{kept}. Image = "
        "the file name of the VOC image. Accuracy = fraction of pairs where the metric scores the preferred caption "
        "strictly higher, per category and the mean of the four; how metric ties count is not specified by the "
        "papers (the statistics report how ties are counted)."
    )
    return Benchmark(
        name="pascal-50s",
        task="pairwise",
        items=tuple(items),
        protocol=protocol,
        primary_statistic="accuracy",
        statistics=("accuracy",),
        source=f"json:{path}",
        citation="Vedantam, Zitnick and Parikh (2015), CIDEr: Consensus-based Image Description Evaluation, CVPR.",
    )


# ----------------------------------------------------------------------------------------------------------------
# Hub datasets and the Polos / DENEB csv layout (Polaris, Nebula, Composite)


def _hub_rows(dataset_id: str, split: str, image_column: str, name: str, how_to_get: str) -> Any:
    """The split of a hub dataset with its image column left undecoded (``{'bytes', 'path'}``)."""
    try:
        import datasets
    except ImportError:  # pragma: no cover - datasets is an install requirement
        raise ImportError(f"benchmark {name!r} with source='hub' needs the 'datasets' package") from None
    if any(os.environ.get(variable, "0") not in ("0", "") for variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")):
        raise ConnectionError(
            f"benchmark {name!r}: source='hub' needs the Hugging Face hub ({dataset_id}) but HF_HUB_OFFLINE or "
            f"HF_DATASETS_OFFLINE is set. {how_to_get}"
        )
    try:
        rows = datasets.load_dataset(dataset_id, split=split)
    except Exception as error:  # network and hub errors come in many types
        raise ConnectionError(
            f"benchmark {name!r}: could not load {dataset_id} (split {split!r}) from the hub: {error}. {how_to_get}"
        ) from error
    return rows.cast_column(image_column, datasets.Image(decode=False))


def _parquet_rows(paths: Sequence[Path], image_column: str) -> Any:
    """Local parquet files in a hub dataset's layout, image column left undecoded."""
    import datasets

    rows = datasets.load_dataset("parquet", data_files=[str(path) for path in paths], split="train")
    return rows.cast_column(image_column, datasets.Image(decode=False))


class _ImageExtractor:
    """Writes embedded hub images into one folder under their own names; a name already used by different bytes
    (in this load or on disk) is replaced by one derived from the content hash, so no item gets another's image."""

    def __init__(self, image_dir: Path) -> None:
        self.image_dir = image_dir
        self._digests: Dict[str, str] = {}

    def write(self, value: Any, name: str, where: str) -> str:
        if not isinstance(value, dict) or not value.get("bytes"):
            raise BenchmarkFormatError(f"{where}: the image column holds no embedded image bytes")
        data = value["bytes"]
        digest = hashlib.sha1(data).hexdigest()
        name = os.path.basename(name)
        target = self.image_dir / name
        taken = self._digests.get(name, digest) != digest or (
            name not in self._digests and target.is_file() and hashlib.sha1(target.read_bytes()).hexdigest() != digest
        )
        if taken:
            name = f"{digest[:20]}{os.path.splitext(name)[1] or '.jpg'}"
            target = self.image_dir / name
        if not target.is_file():
            self.image_dir.mkdir(parents=True, exist_ok=True)
            temporary = target.with_name(target.name + ".part")
            temporary.write_bytes(data)
            os.replace(temporary, target)
        self._digests[name] = digest
        return name


def _default_image_dir(name: str, split: str) -> Path:
    cache = Path(os.environ.get("CAPEVAL_CACHE", Path.home() / ".cache" / "capeval"))
    return cache / "benchmarks" / name / split / "images"


def _polos_item(row: Dict[str, Any], references: Any, index: int, where: str, image: str) -> RatedItem:
    """One rated candidate of the Polos / DENEB layouts (``mt``, ``refs``, ``score``; image named ``image``)."""
    return RatedItem(
        image=image,
        candidate=_text(row["mt"], f"{where} 'mt'"),
        references=_texts(references, f"{where} 'refs'"),
        human=_number(row["score"], f"{where} 'score'"),
        key=f"{row['imgid']}#{index}",
    )


def _polos_csv_items(path: Path) -> List[RatedItem]:
    """Items of a csv in the Polos / DENEB layout: ``imgid``, ``mt``, ``refs`` (a Python list literal), ``score``."""
    items = []
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        missing = {"imgid", "mt", "refs", "score"} - set(reader.fieldnames or [])
        if missing:
            raise BenchmarkFormatError(f"{path}: missing column(s) {', '.join(sorted(missing))}")
        for index, row in enumerate(reader):
            where = f"{path} row {index}"
            try:
                references = ast.literal_eval(row["refs"])
            except (ValueError, SyntaxError):
                raise BenchmarkFormatError(f"{where}: 'refs' is not a list literal: {row['refs']!r}") from None
            items.append(_polos_item(row, references, index, where, row["imgid"]))
    return items


def _polos_json_items(path: Path) -> List[RatedItem]:
    """Items of a JSON list of ``{"imgid", "mt", "refs", "score"}`` records, the layout that evaluation scripts of
    later metrics distribute (``polaris_test.json``, ``nebula_test.json``); the image is ``<imgid>.jpg`` (``imgid``
    as it is when it already ends in an image suffix), as those scripts name it."""
    records = _read_json(path)
    if not isinstance(records, list):
        raise BenchmarkFormatError(f"{path}: expected a JSON list of {{imgid, mt, refs, score}} records, "
                                   f"found {type(records).__name__}")
    items = []
    for index, row in enumerate(records):
        where = f"{path} entry {index}"
        if not isinstance(row, dict):
            raise BenchmarkFormatError(f"{where}: expected an object, found {type(row).__name__}")
        missing = {"imgid", "mt", "refs", "score"} - set(row)
        if missing:
            raise BenchmarkFormatError(f"{where}: missing key(s) {', '.join(sorted(missing))}")
        imgid = str(row["imgid"])
        image = imgid if Path(imgid).suffix.lower() in (".jpg", ".jpeg", ".png") else f"{imgid}.jpg"
        items.append(_polos_item(row, row["refs"], index, where, image))
    return items


def _hub_layout_items(
    rows: Any, name: str, split: str, image_dir: Path, columns: Dict[str, str], where: str
) -> List[RatedItem]:
    """Items of rows in a hub layout; ``columns`` maps image / candidate / references / human / file_name to columns."""
    items = []
    extractor = _ImageExtractor(image_dir)
    for index, row in enumerate(rows):
        row_where = f"{where} row {index}"
        value = row[columns["image"]]
        own_name = row.get(columns.get("file_name", "")) or (value.get("path") if isinstance(value, dict) else None)
        image = extractor.write(value, own_name or f"{name}-{split}-{index:06d}.jpg", row_where)
        items.append(
            RatedItem(
                image=image,
                candidate=_text(row[columns["candidate"]], f"{row_where} {columns['candidate']!r}"),
                references=_texts(row[columns["references"]], f"{row_where} {columns['references']!r}"),
                human=_number(row[columns["human"]], f"{row_where} {columns['human']!r}"),
                key=f"{image}#{index}",
            )
        )
    return items


_POLARIS_HOW = (
    "Polaris (Wada et al., CVPR 2024) is the hub dataset yuwd/Polaris: load it online with source='hub', or pass "
    "root= a folder holding polaris_<split>.csv or polaris_<split>.json (columns / keys imgid, mt, refs, score; "
    "images in images/), or the hub parquet files (columns refs, cand, img, human_score)."
)
_NEBULA_HOW = (
    "Nebula (Matsuda et al., ACCV 2024) is the hub dataset Ka2ukiMatsuda/Nebula: load it online with "
    "source='hub', or pass root= a folder holding nebula_<split>.csv or nebula_<split>.json (columns / keys imgid, "
    "mt, refs, score; images in images/), or the hub parquet files (columns file_name, image, refs, mt, "
    "human_score)."
)

_HUB_LAYOUTS = {
    "polaris": {
        "dataset": "yuwd/Polaris",
        "splits": {"test": "test", "validation": "validation", "train": "train"},
        "stem": "polaris_{split}",
        "file_split": {"test": "test", "validation": "val", "train": "train"},
        "columns": {"image": "img", "candidate": "cand", "references": "refs", "human": "human_score"},
        "how": _POLARIS_HOW,
        "citation": (
            "Wada, Kaneda, Saito and Sugiura (2024), Polos: Multimodal Metric Learning from Human Feedback for Image "
            "Captioning, CVPR."
        ),
        "title": "Polaris (Wada et al., 2024)",
    },
    "nebula": {
        "dataset": "Ka2ukiMatsuda/Nebula",
        "splits": {"test": "test", "validation": "valid", "train": "train"},
        "stem": "nebula_{split}",
        "file_split": {"test": "test", "validation": "val", "train": "train"},
        "columns": {
            "image": "image", "candidate": "mt", "references": "refs", "human": "human_score", "file_name": "file_name"
        },
        "how": _NEBULA_HOW,
        "citation": (
            "Matsuda, Wada and Sugiura (2024), DENEB: A Hallucination-Robust Automatic Evaluation Metric for Image "
            "Captioning, ACCV."
        ),
        "title": "Nebula (Matsuda et al., 2024)",
    },
}


def _load_hub_layout(
    name: str, root: Optional[PathLike], source: str, split: str = "test", image_dir: Optional[PathLike] = None
) -> Benchmark:
    layout = _HUB_LAYOUTS[name]
    if split not in layout["splits"]:
        raise InputError(f"benchmark {name!r}: split must be one of {', '.join(layout['splits'])}, not {split!r}")
    if source not in ("auto", "csv", "json", "parquet", "hub"):
        raise InputError(
            f"benchmark {name!r}: source must be 'auto', 'csv', 'json', 'parquet' or 'hub', not {source!r}"
        )
    stem = layout["stem"].format(split=layout["file_split"][split])
    if source == "auto":
        if root is None:
            raise FileNotFoundError(f"benchmark {name!r} needs root= or source='hub'. {layout['how']}")
        folder = Path(root)
        if folder.is_file():
            source = {".csv": "csv", ".json": "json", ".parquet": "parquet"}.get(folder.suffix.lower(), "")
            if not source:
                raise BenchmarkFormatError(f"{folder}: not a layout of benchmark {name!r} (a .csv, .json or .parquet "
                                           f"file, or a folder of them). {layout['how']}")
        else:
            source = next((kind for kind in ("csv", "json") if (folder / f"{stem}.{kind}").is_file()), "parquet")
    extracted_dir = Path(image_dir) if image_dir is not None else _default_image_dir(name, split)
    if source in ("csv", "json"):
        path = _locate(root, [f"{stem}.{source}"], name, layout["how"])
        items = _polos_csv_items(path) if source == "csv" else _polos_json_items(path)
        origin, folder_of_images = f"{source}:{path}", str(path.parent / "images")
        read = (f"read from {path} (Polos {source} layout: imgid, mt, refs, score; one "
                f"{'row' if source == 'csv' else 'record'} per rated candidate)")
    else:
        if source == "hub":
            rows = _hub_rows(
                layout["dataset"], layout["splits"][split], layout["columns"]["image"], name, layout["how"]
            )
            origin = f"hub:{layout['dataset']}:{layout['splits'][split]}"
        else:
            paths = _parquet_files(root, layout["splits"][split], name, layout["how"])
            rows = _parquet_rows(paths, layout["columns"]["image"])
            origin = f"parquet:{', '.join(str(path) for path in paths)}"
        items = _hub_layout_items(rows, name, split, extracted_dir, layout["columns"], origin)
        folder_of_images = str(extracted_dir)
        read = f"read from {origin} (hub layout, one row per rated candidate; images written to {extracted_dir})"
    protocol = (
        f"{layout['title']} {split} split, {read}: {len(items)} items, human score = the dataset's score for the "
        "(image, candidate) pair, references as listed. Texts whitespace-normalised. Report Kendall tau-c "
        "(primary) and tau-b of scipy.stats.kendalltau(metric, human) x 100."
    )
    return Benchmark(
        name=name,
        task="correlation",
        items=tuple(items),
        protocol=protocol,
        primary_statistic="kendall_tau_c",
        statistics=("kendall_tau_c", "kendall_tau_b"),
        source=origin,
        citation=layout["citation"],
        image_dir=folder_of_images,
    )


def _parquet_files(root: Optional[PathLike], split: str, name: str, how_to_get: str) -> List[Path]:
    """The parquet files of ``split`` under ``root`` (hub layout ``data/<split>-*.parquet``, or ``root`` itself)."""
    if root is None:
        raise FileNotFoundError(f"benchmark {name!r} needs root= or source='hub'. {how_to_get}")
    path = Path(root)
    if path.is_file():
        return [path]
    found = sorted(path.glob(f"{split}-*.parquet")) + sorted(path.glob(f"data/{split}-*.parquet"))
    if not found:
        raise FileNotFoundError(f"no {split}-*.parquet files in {str(path)!r} or its data/ folder. {how_to_get}")
    return found


# ----------------------------------------------------------------------------------------------------------------
# Composite (Aditya et al., 2015)

_COMPOSITE_HOW = (
    "Composite (Aditya et al., 2015): pass root= a folder holding the AMT result files 8k_correctness.csv, "
    "30k_correctness.csv and coco_correctness.csv (';'-separated: Input.image_url, Input.textN, Answer.QNAnswer) "
    "with the reference files Flickr8k.token.txt, results_20130124.token (Flickr30k) and captions_val2014.json "
    "(COCO), or the Polos csv en_test_composite_da.csv (imgid, mt, refs, score)."
)
_COMPOSITE_SUBSETS = {
    "8k": ("8k_correctness.csv", "Flickr8k.token.txt"),
    "30k": ("30k_correctness.csv", "results_20130124.token"),
    "coco": ("coco_correctness.csv", "captions_val2014.json"),
}


def _token_references(path: Path) -> Dict[str, List[str]]:
    """References per image file name from a Flickr ``image#k<TAB>caption`` token file."""
    references: Dict[str, List[str]] = {}
    for _, (caption_id, caption) in _tab_rows(path, 2):
        references.setdefault(caption_id.partition("#")[0], []).append(caption)
    return references


def _coco_references(path: Path) -> Dict[str, List[str]]:
    """References per COCO val2014 file name (``COCO_val2014_<12-digit id>.jpg``) from captions_val2014.json."""
    data = _read_json(path)
    names = {image["id"]: image["file_name"] for image in data.get("images", [])}
    references: Dict[str, List[str]] = {}
    for annotation in data.get("annotations", []):
        name = names.get(annotation["image_id"], f"COCO_val2014_{annotation['image_id']:012d}.jpg")
        references.setdefault(name, []).append(annotation["caption"])
    return references


def _composite_amt_items(
    root: Path, subsets: Sequence[str], drop_first_reference: bool
) -> Tuple[List[RatedItem], int, int]:
    """Items of the AMT correctness files, the number of references removed, rows skipped.

    By default a candidate loses the references equal to it. With ``drop_first_reference`` (TIGEr's protocol) the
    human candidate (``Input.text1``) loses the image's first reference in file order, whatever it says, and machine
    candidates keep all references; an image with a single reference keeps it (TIGEr's code would stack an empty
    list and raise), with a warning giving their number."""
    items: List[RatedItem] = []
    removed = skipped = kept_single = 0
    for subset in subsets:
        if subset not in _COMPOSITE_SUBSETS:
            raise InputError(f"benchmark 'composite': unknown subset {subset!r} (use {', '.join(_COMPOSITE_SUBSETS)})")
        ratings_name, references_name = _COMPOSITE_SUBSETS[subset]
        ratings_path = _locate(root, [ratings_name], "composite", _COMPOSITE_HOW)
        references_path = _locate(root, [references_name], "composite", _COMPOSITE_HOW)
        references = (
            _coco_references(references_path) if subset == "coco" else _token_references(references_path)
        )
        with open(ratings_path, encoding="utf-8", errors="replace", newline="") as handle:
            reader = csv.DictReader(handle, delimiter=";")
            fields = reader.fieldnames or []
            count = sum(1 for field in fields if field.startswith("Input.text"))
            if "Input.image_url" not in fields or count == 0:
                raise BenchmarkFormatError(f"{ratings_path}: needs Input.image_url and Input.text1.. columns")
            for index, row in enumerate(reader):
                url = (row.get("Input.image_url") or "").strip()
                answers = [row.get(f"Answer.Q{k}Answer") for k in range(1, count + 1)]
                if not url or any(answer in (None, "") for answer in answers):
                    skipped += 1  # the AMT export ends with summary rows that hold no HIT
                    continue
                image = url.rsplit("/", 1)[-1]
                where = f"{ratings_path} row {index}"
                if image not in references:
                    raise BenchmarkFormatError(f"{where}: image {image!r} has no references in {references_name}")
                for k, answer in enumerate(answers, 1):
                    candidate = row[f"Input.text{k}"]
                    if not drop_first_reference:
                        image_references = [reference for reference in references[image] if reference != candidate]
                    elif k == 1 and len(references[image]) == 1:
                        image_references, kept_single = references[image], kept_single + 1
                    else:
                        image_references = references[image][1:] if k == 1 else references[image]
                    removed += len(references[image]) - len(image_references)
                    items.append(
                        RatedItem(
                            image=image,
                            candidate=_text(candidate, f"{where} Input.text{k}"),
                            references=_texts(image_references, f"{where} references"),
                            human=_number(answer, f"{where} Answer.Q{k}Answer"),
                            key=f"{subset}#{index}#{k}",
                        )
                    )
    if kept_single:
        warnings.warn(f"benchmark 'composite': drop_first_reference kept the only reference of {kept_single} human "
                      "candidate(s) (TIGEr's code raises there)", stacklevel=3)
    return items, removed, skipped


def _load_composite(
    root: Optional[PathLike],
    source: str,
    subsets: Sequence[str] = ("8k", "30k", "coco"),
    drop_first_reference: bool = False,
) -> Benchmark:
    if source not in ("auto", "amt", "csv"):
        raise InputError(f"benchmark 'composite': source must be 'auto', 'amt' or 'csv', not {source!r}")
    if root is None:
        raise FileNotFoundError(f"benchmark 'composite' needs root=. {_COMPOSITE_HOW}")
    folder = Path(root)
    if source == "auto":
        amt_files = [folder / _COMPOSITE_SUBSETS[subset][0] for subset in subsets if subset in _COMPOSITE_SUBSETS]
        source = "amt" if any(path.is_file() for path in amt_files) else "csv"
    if source == "amt":
        items, removed, skipped = _composite_amt_items(folder, subsets, drop_first_reference)
        if drop_first_reference:
            kept = (f"all of them for machine candidates; for the human candidate (Input.text1) all but the first in "
                    f"file order, as TIGEr's evaluation drops it ({removed} removed)")
        else:
            kept = (f"minus those equal to the candidate ({removed} removed: the rated human caption was drawn from "
                    "the references)")
        read = (
            f"read from the AMT correctness files of subsets {', '.join(subsets)} in {folder} ({skipped} rows "
            "without a complete HIT skipped); each rated candidate is one item with its correctness rating (1-5); "
            f"references = the image's captions (Flickr8k / Flickr30k / COCO) {kept}"
        )
        origin, images = f"amt:{folder}", ""
    else:
        if drop_first_reference:
            raise InputError("benchmark 'composite': drop_first_reference needs the AMT correctness files (the Polos "
                             "csv does not say which candidate is the human one)")
        path = _locate(folder, ["en_test_composite_da.csv"], "composite", _COMPOSITE_HOW)
        items = _polos_csv_items(path)
        read = f"read from the Polos csv {path} (imgid, mt, refs, score) as distributed, references as listed"
        origin, images = f"csv:{path}", str(path.parent / "images")
    protocol = (
        f"Composite (Aditya et al., 2015) as CLIPScore evaluates it: {read}. {len(items)} items. Texts "
        "whitespace-normalised. Report Kendall tau-c (primary) and tau-b of scipy.stats.kendalltau(metric, human) "
        "x 100."
    )
    return Benchmark(
        name="composite",
        task="correlation",
        items=tuple(items),
        protocol=protocol,
        primary_statistic="kendall_tau_c",
        statistics=("kendall_tau_c", "kendall_tau_b"),
        source=origin,
        citation=(
            "Aditya, Yang, Baral, Fermuller and Aloimonos (2015), From Images to Sentences through Scene Description "
            "Graphs using Commonsense Reasoning and Knowledge, arXiv:1511.03292."
        ),
        image_dir=images,
    )


# ----------------------------------------------------------------------------------------------------------------
# FOIL (Shekhar et al., 2017)

_FOIL_HOW = (
    "FOIL-COCO (Shekhar et al., 2017): pass root= a folder holding foilv1.0_test_2017.json and the COCO "
    "captions_val2014.json (references); images are COCO val2014."
)


def _load_foil(root: Optional[PathLike], source: str, references: int = 4) -> Benchmark:
    if source not in ("auto", "json"):
        raise InputError(f"benchmark 'foil': source must be 'auto' or 'json', not {source!r}")
    if references not in (1, 4):
        raise InputError(f"benchmark 'foil': references must be 1 or 4, not {references!r}")
    foil_path = _locate(root, ["foilv1.0_test_2017.json"], "foil", _FOIL_HOW)
    coco_path = _locate(foil_path.parent, ["captions_val2014.json"], "foil", _FOIL_HOW)
    coco = _coco_references(coco_path)
    data = _read_json(foil_path)
    try:
        names = {image["id"]: image["file_name"] for image in data["images"]}
        annotations = data["annotations"]
    except (KeyError, TypeError):
        raise BenchmarkFormatError(f"{foil_path}: needs 'images' (id, file_name) and 'annotations'") from None
    groups: "OrderedDict[Any, Dict[str, List[Dict[str, Any]]]]" = OrderedDict()
    for index, annotation in enumerate(annotations):
        if not {"id", "image_id", "caption", "foil"} <= set(annotation):
            raise BenchmarkFormatError(f"{foil_path} annotations[{index}]: needs id, image_id, caption and foil")
        group = groups.setdefault(annotation["id"], {"orig": [], "foil": []})
        group["foil" if annotation["foil"] else "orig"].append(annotation)
    items: List[FoilItem] = []
    for group_id, group in groups.items():
        if len(group["orig"]) != 1:
            raise BenchmarkFormatError(
                f"{foil_path}: caption id {group_id!r} has {len(group['orig'])} original captions (expected 1)"
            )
        original = group["orig"][0]
        image_id = original["image_id"]
        if image_id not in names:
            raise BenchmarkFormatError(f"{foil_path}: image id {image_id!r} is not in 'images'")
        image = names[image_id]
        pool = [caption for caption in coco.get(image, []) if caption != original["caption"]]
        if len(pool) < references:
            raise BenchmarkFormatError(
                f"{foil_path}: image {image!r} has {len(pool)} COCO references besides the original caption, "
                f"{references} needed"
            )
        item_references = _texts(pool[:references], f"{coco_path} references of {image!r}")
        for number, foil in enumerate(group["foil"]):
            pair = f"{group_id}#{number}"
            for annotation, is_foil in ((original, False), (foil, True)):
                items.append(
                    FoilItem(
                        image=image,
                        candidate=_text(annotation["caption"], f"{foil_path} caption id {group_id!r}"),
                        references=item_references,
                        is_foil=is_foil,
                        key=f"{pair}#{'foil' if is_foil else 'orig'}",
                        pair=pair,
                    )
                )
    protocol = (
        f"FOIL (Shekhar et al., 2017) test split from {foil_path}: every foil caption is paired with the original "
        f"COCO caption it was made from ({len(items) // 2} pairs, two items per pair sharing 'pair'); references = "
        f"the first {references} COCO captions of the image (captions_val2014.json order) other than the original "
        "caption. Accuracy = fraction of pairs where the metric scores the original caption strictly higher than "
        "the foil (CLIPScore and PAC-S report it with 1 and with 4 references; PAC-S used an 8k-image subset not "
        "overlapping its training data)."
    )
    return Benchmark(
        name="foil",
        task="foil",
        items=tuple(items),
        protocol=protocol,
        primary_statistic="accuracy",
        statistics=("accuracy",),
        source=f"json:{foil_path}",
        citation="Shekhar et al. (2017), FOIL it! Find One mismatch between Image and Language caption, ACL.",
    )


# ----------------------------------------------------------------------------------------------------------------
# THumB 1.0 (Kasai et al., 2022)

_THUMB_HOW = (
    "THumB 1.0 (Kasai et al., 2022): pass root= a folder holding mscoco_THumB-1.0.jsonl and mscoco_references.json "
    "(JSON lines {seg_id, refs}) from jungokasai/THumB; images are COCO val2014 (Karpathy test split)."
)


def _load_thumb(root: Optional[PathLike], source: str, include_human: bool = True) -> Benchmark:
    if source not in ("auto", "jsonl"):
        raise InputError(f"benchmark 'thumb': source must be 'auto' or 'jsonl', not {source!r}")
    scores_path = _locate(root, ["mscoco_THumB-1.0.jsonl"], "thumb", _THUMB_HOW)
    references_path = _locate(
        scores_path.parent, ["mscoco_references.json", "mscoco_references.jsonl"], "thumb", _THUMB_HOW
    )
    references = {}
    for index, row in enumerate(_read_jsonl(references_path)):
        if "seg_id" not in row or "refs" not in row:
            raise BenchmarkFormatError(f"{references_path} line {index + 1}: needs seg_id and refs")
        references[str(row["seg_id"])] = _texts(row["refs"], f"{references_path} seg_id {row['seg_id']!r}")
    items = []
    for index, row in enumerate(_read_jsonl(scores_path)):
        where = f"{scores_path} line {index + 1}"
        if not {"SYS", "seg_id", "hyp", "image", "human_score"} <= set(row):
            raise BenchmarkFormatError(f"{where}: needs SYS, seg_id, hyp, image and human_score")
        if row["SYS"] == "Human" and not include_human:
            continue
        seg_id = str(row["seg_id"])
        if seg_id not in references:
            raise BenchmarkFormatError(f"{where}: seg_id {seg_id!r} has no references in {references_path}")
        items.append(
            RatedItem(
                image=row["image"],
                candidate=_text(row["hyp"], f"{where} hyp"),
                references=references[seg_id],
                human=_number(row["human_score"], f"{where} human_score"),
                key=f"{seg_id}#{row['SYS']}",
            )
        )
    human = "including" if include_human else "excluding"
    protocol = (
        f"THumB 1.0 (Kasai et al., 2022) from {scores_path}: one item per (image, system) {human} the 'Human' "
        f"system, {len(items)} items; human score = human_score = (P + R) / 2 + fluency, conciseness and "
        f"inclusive-language penalties; references = the image's COCO captions from {references_path.name} (the "
        "rated Human caption is not among them). Texts whitespace-normalised. Report Pearson r (primary, as THumB "
        "reports) and Kendall tau-c / tau-b x 100."
    )
    return Benchmark(
        name="thumb",
        task="correlation",
        items=tuple(items),
        protocol=protocol,
        primary_statistic="pearson",
        statistics=("pearson", "kendall_tau_c", "kendall_tau_b"),
        source=f"jsonl:{scores_path}",
        citation="Kasai et al. (2022), Transparent Human Evaluation for Image Captioning, NAACL.",
    )


# ----------------------------------------------------------------------------------------------------------------
# Registry

def _load_polaris(
    root: Optional[PathLike], source: str, split: str = "test", image_dir: Optional[PathLike] = None
) -> Benchmark:
    return _load_hub_layout("polaris", root, source, split=split, image_dir=image_dir)


def _load_nebula(
    root: Optional[PathLike], source: str, split: str = "test", image_dir: Optional[PathLike] = None
) -> Benchmark:
    return _load_hub_layout("nebula", root, source, split=split, image_dir=image_dir)


_LOADERS: Dict[str, Callable[..., Benchmark]] = {
    "flickr8k-expert": _load_flickr8k_expert,
    "flickr8k-cf": _load_flickr8k_cf,
    "composite": _load_composite,
    "pascal-50s": _load_pascal50s,
    "foil": _load_foil,
    "polaris": _load_polaris,
    "nebula": _load_nebula,
    "thumb": _load_thumb,
}


def available_benchmarks() -> List[str]:
    """Names accepted by :func:`load_benchmark`."""
    return sorted(_LOADERS)


def load_benchmark(name: str, root: Optional[PathLike] = None, *, source: str = "auto", **options: Any) -> Benchmark:
    """Load benchmark ``name`` from ``root`` (a folder, or the data file itself) in its published layout.

    ``source`` picks the layout ("auto" detects it): flickr8k-*: "text" | "json"; pascal-50s, foil: "json";
    composite: "amt" | "csv"; polaris, nebula: "csv" | "json" | "parquet" | "hub"; thumb: "jsonl". Options:
    pascal-50s ``references``; foil ``references`` (1 or 4); composite ``subsets``, ``drop_first_reference``
    (TIGEr's protocol: the human candidate loses the image's first reference, not those equal to it);
    polaris / nebula ``split``,
    ``image_dir`` (where embedded hub images are written); thumb ``include_human``.
    """
    if name not in _LOADERS:
        raise ValueError(f"unknown benchmark {name!r}; available: {', '.join(available_benchmarks())}")
    loader = _LOADERS[name]
    accepted = [parameter for parameter in inspect.signature(loader).parameters if parameter not in ("root", "source")]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        allowed = ", ".join(accepted) or "none"
        raise TypeError(f"benchmark {name!r} does not take option(s) {', '.join(unknown)} (options: {allowed})")
    return loader(root, source, **options)

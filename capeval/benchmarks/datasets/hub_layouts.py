"""Polaris (Wada et al., 2024) and Nebula (Matsuda et al., 2024): hub datasets read online, from their parquet files,
or from the Polos / DENEB csv and JSON files. Images embedded in hub rows are written to an images folder."""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from capeval.benchmarks.datasets.base import (Benchmark, BenchmarkFormatError, BenchmarkSpec, ItemsRead, PathLike,
                                              RatedItem, as_caption, as_number, as_references)
from capeval.benchmarks.datasets.polos import polos_csv_items, polos_json_items
from capeval.inputs import InputError

_STATISTICS = ("kendall_tau_c", "kendall_tau_b")
_SOURCES = ("auto", "csv", "json", "parquet", "hub")
_FILE_SPLITS = {"test": "test", "validation": "val", "train": "train"}


@dataclass(frozen=True)
class HubLayout:
    """A hub dataset of rated captions: its benchmark name and title, its hub id and split names, the hub columns
    holding ``image``, ``candidate``, ``references``, ``human`` (and optionally ``file_name``), how to get it and its
    citation. Its local csv / JSON files are named ``<name>_<split>``."""

    name: str
    title: str
    dataset: str
    splits: Dict[str, str]
    columns: Dict[str, str]
    how_to_get: str
    citation: str

    @property
    def spec(self) -> BenchmarkSpec:
        """The benchmark's spec: Kendall tau-c (primary) and tau-b of a correlation task."""
        return BenchmarkSpec(self.name, "correlation", _STATISTICS, _SOURCES, self.how_to_get, self.citation)

    def file_stem(self, split: str) -> str:
        """The name of the local csv / JSON file of ``split`` without its suffix."""
        return f"{self.name}_{_FILE_SPLITS[split]}"


POLARIS = HubLayout(
    "polaris",
    "Polaris (Wada et al., 2024)",
    "yuwd/Polaris",
    {"test": "test", "validation": "validation", "train": "train"},
    {"image": "img", "candidate": "cand", "references": "refs", "human": "human_score"},
    "Polaris (Wada et al., CVPR 2024) is the hub dataset yuwd/Polaris: load it online with source='hub', or pass "
    "root=<folder> holding polaris_<split>.csv or polaris_<split>.json (columns / keys imgid, mt, refs, score; "
    "images in images/), or the hub parquet files (columns refs, cand, img, human_score).",
    "Wada, Kaneda, Saito and Sugiura (2024), Polos: Multimodal Metric Learning from Human Feedback for Image "
    "Captioning, CVPR.",
)
NEBULA = HubLayout(
    "nebula",
    "Nebula (Matsuda et al., 2024)",
    "Ka2ukiMatsuda/Nebula",
    {"test": "test", "validation": "valid", "train": "train"},
    {"image": "image", "candidate": "mt", "references": "refs", "human": "human_score", "file_name": "file_name"},
    "Nebula (Matsuda et al., ACCV 2024) is the hub dataset Ka2ukiMatsuda/Nebula: load it online with "
    "source='hub', or pass root=<folder> holding nebula_<split>.csv or nebula_<split>.json (columns / keys "
    "imgid, mt, refs, score; images in images/), or the hub parquet files (columns file_name, image, refs, mt, "
    "human_score).",
    "Matsuda, Wada and Sugiura (2024), DENEB: A Hallucination-Robust Automatic Evaluation Metric for Image "
    "Captioning, ACCV.",
)


def _hub_rows(layout: HubLayout, split: str) -> Any:
    """The split of a hub dataset with its image column left undecoded (``{'bytes', 'path'}``)."""
    name, how_to_get = layout.name, layout.how_to_get
    try:
        import datasets
    except ImportError:  # pragma: no cover - datasets is an install requirement
        raise ImportError(f"benchmark {name!r} with source='hub' needs the 'datasets' package") from None
    if any(os.environ.get(variable, "0") not in ("0", "") for variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")):
        raise ConnectionError(
            f"benchmark {name!r}: source='hub' needs the Hugging Face hub ({layout.dataset}) but HF_HUB_OFFLINE or "
            f"HF_DATASETS_OFFLINE is set. {how_to_get}"
        )
    try:
        rows = datasets.load_dataset(layout.dataset, split=split)
    except Exception as error:  # network and hub errors come in many types
        raise ConnectionError(
            f"benchmark {name!r}: could not load {layout.dataset} (split {split!r}) from the hub: {error}. "
            f"{how_to_get}"
        ) from error
    return rows.cast_column(layout.columns["image"], datasets.Image(decode=False))


def _parquet_files(layout: HubLayout, root: Optional[PathLike], split: str) -> List[Path]:
    """The parquet files of ``split`` under ``root`` (hub layout ``data/<split>-*.parquet``, or ``root`` itself)."""
    how_to_get = layout.how_to_get
    if root is None:
        raise FileNotFoundError(f"benchmark {layout.name!r} needs root=<folder> or source='hub'. {how_to_get}")
    path = Path(root)
    if path.is_file():
        return [path]
    found = sorted(path.glob(f"{split}-*.parquet")) + sorted(path.glob(f"data/{split}-*.parquet"))
    if not found:
        raise FileNotFoundError(f"no {split}-*.parquet files in {str(path)!r} or its data/ folder. {how_to_get}")
    return found


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
        if self._taken(name, digest):
            name = f"{digest[:20]}{os.path.splitext(name)[1] or '.jpg'}"
        target = self.image_dir / name
        if not target.is_file():
            self.image_dir.mkdir(parents=True, exist_ok=True)
            temporary = target.with_name(target.name + ".part")
            temporary.write_bytes(data)
            os.replace(temporary, target)
        self._digests[name] = digest
        return name

    def _taken(self, name: str, digest: str) -> bool:
        """Whether ``name`` already holds other bytes than those of ``digest``, in this load or on disk."""
        if name in self._digests:
            return self._digests[name] != digest
        target = self.image_dir / name
        return target.is_file() and hashlib.sha1(target.read_bytes()).hexdigest() != digest


def _default_image_dir(name: str, split: str) -> Path:
    cache = Path(os.environ.get("CAPEVAL_CACHE", Path.home() / ".cache" / "capeval"))
    return cache / "benchmarks" / name / split / "images"


def _row_items(rows: Any, layout: HubLayout, split: str, image_dir: Path, where: str) -> List[RatedItem]:
    """Items of rows in a hub layout, their embedded images written to ``image_dir``."""
    items = []
    columns = layout.columns
    extractor = _ImageExtractor(image_dir)
    for index, row in enumerate(rows):
        row_where = f"{where} row {index}"
        value = row[columns["image"]]
        own_name = row.get(columns.get("file_name", "")) or (value.get("path") if isinstance(value, dict) else None)
        image = extractor.write(value, own_name or f"{layout.name}-{split}-{index:06d}.jpg", row_where)
        items.append(
            RatedItem(
                image=image,
                candidate=as_caption(row[columns["candidate"]], f"{row_where} {columns['candidate']!r}"),
                references=as_references(row[columns["references"]], f"{row_where} {columns['references']!r}"),
                human=as_number(row[columns["human"]], f"{row_where} {columns['human']!r}"),
                key=f"{image}#{index}",
            )
        )
    return items


def _detected_source(layout: HubLayout, root: Optional[PathLike], split: str) -> str:
    """The layout ``source="auto"`` finds at ``root``: a file's by its suffix, a folder's by the files it holds."""
    if root is None:
        raise FileNotFoundError(f"benchmark {layout.name!r} needs root=<folder> or source='hub'. {layout.how_to_get}")
    folder = Path(root)
    if not folder.is_file():
        stem = layout.file_stem(split)
        return next((kind for kind in ("csv", "json") if (folder / f"{stem}.{kind}").is_file()), "parquet")
    source = {".csv": "csv", ".json": "json", ".parquet": "parquet"}.get(folder.suffix.lower(), "")
    if not source:
        raise BenchmarkFormatError(f"{folder}: not a layout of benchmark {layout.name!r} (a .csv, .json or .parquet "
                                   f"file, or a folder of them). {layout.how_to_get}")
    return source


def _read_record_file(layout: HubLayout, root: Optional[PathLike], source: str, split: str) -> ItemsRead:
    """Items of the Polos / DENEB ``csv`` or ``json`` file of ``split``."""
    path = layout.spec.locate(root, [f"{layout.file_stem(split)}.{source}"])
    items = polos_csv_items(path) if source == "csv" else polos_json_items(path)
    description = (f"read from {path} (Polos {source} layout: imgid, mt, refs, score; one "
                   f"{'row' if source == 'csv' else 'record'} per rated candidate)")
    return ItemsRead(items, f"{source}:{path}", description, str(path.parent / "images"))


def _read_hub_rows(
    layout: HubLayout, root: Optional[PathLike], source: str, split: str, image_dir: Optional[PathLike]
) -> ItemsRead:
    """Items of the hub dataset's ``split``, online (``hub``) or from its ``parquet`` files."""
    hub_split = layout.splits[split]
    if source == "hub":
        rows = _hub_rows(layout, hub_split)
        origin = f"hub:{layout.dataset}:{hub_split}"
    else:
        paths = _parquet_files(layout, root, hub_split)
        rows = _parquet_rows(paths, layout.columns["image"])
        origin = f"parquet:{', '.join(str(path) for path in paths)}"
    extracted_dir = Path(image_dir) if image_dir is not None else _default_image_dir(layout.name, split)
    items = _row_items(rows, layout, split, extracted_dir, origin)
    description = f"read from {origin} (hub layout, one row per rated candidate; images written to {extracted_dir})"
    return ItemsRead(items, origin, description, str(extracted_dir))


def _load(
    layout: HubLayout, root: Optional[PathLike], source: str, split: str, image_dir: Optional[PathLike]
) -> Benchmark:
    spec = layout.spec
    if split not in layout.splits:
        raise InputError(f"benchmark {spec.name!r}: split must be one of {', '.join(layout.splits)}, not {split!r}")
    spec.check_source(source)
    if source == "auto":
        source = _detected_source(layout, root, split)
    if source in ("csv", "json"):
        read = _read_record_file(layout, root, source, split)
    else:
        read = _read_hub_rows(layout, root, source, split, image_dir)
    protocol = (
        f"{layout.title} {split} split, {read.description}: {len(read.items)} items, human score = the dataset's "
        "score for the (image, candidate) pair, references as listed. Texts whitespace-normalised. Report Kendall "
        "tau-c (primary) and tau-b of scipy.stats.kendalltau(metric, human) x 100."
    )
    return spec.build(read.items, protocol, read.source, read.image_dir)


def load_polaris(
    root: Optional[PathLike], source: str, split: str = "test", image_dir: Optional[PathLike] = None
) -> Benchmark:
    """Polaris ``split``; ``image_dir`` is where the images embedded in hub rows are written."""
    return _load(POLARIS, root, source, split, image_dir)


def load_nebula(
    root: Optional[PathLike], source: str, split: str = "test", image_dir: Optional[PathLike] = None
) -> Benchmark:
    """Nebula ``split``; ``image_dir`` is where the images embedded in hub rows are written."""
    return _load(NEBULA, root, source, split, image_dir)

"""Composite (Aditya et al., 2015): correctness ratings of Flickr8k, Flickr30k and COCO captions, read from the AMT
result files with the datasets' reference files, or from the Polos csv."""
from __future__ import annotations

import csv
import warnings
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from capeval.benchmarks.datasets.base import (Benchmark, BenchmarkFormatError, BenchmarkSpec, ItemsRead, PathLike,
                                              RatedItem, as_caption, as_number, as_references, coco_references,
                                              tab_rows)
from capeval.benchmarks.datasets.polos import polos_csv_items
from capeval.inputs import InputError

_HOW = (
    "Composite (Aditya et al., 2015): pass root=<folder> holding the AMT result files 8k_correctness.csv, "
    "30k_correctness.csv and coco_correctness.csv (';'-separated: Input.image_url, Input.textN, Answer.QNAnswer) "
    "with the reference files Flickr8k.token.txt, results_20130124.token (Flickr30k) and captions_val2014.json "
    "(COCO), or the Polos csv en_test_composite_da.csv (imgid, mt, refs, score)."
)
COMPOSITE = BenchmarkSpec(
    "composite",
    "correlation",
    ("kendall_tau_c", "kendall_tau_b"),
    ("auto", "amt", "csv"),
    _HOW,
    "Aditya, Yang, Baral, Fermuller and Aloimonos (2015), From Images to Sentences through Scene Description Graphs "
    "using Commonsense Reasoning and Knowledge, arXiv:1511.03292.",
)
SUBSETS = {
    "8k": ("8k_correctness.csv", "Flickr8k.token.txt"),
    "30k": ("30k_correctness.csv", "results_20130124.token"),
    "coco": ("coco_correctness.csv", "captions_val2014.json"),
}


def _token_references(path: Path) -> Dict[str, List[str]]:
    """References per image file name from a Flickr ``image#k<TAB>caption`` token file."""
    references: Dict[str, List[str]] = {}
    for _, (caption_id, caption) in tab_rows(path, 2):
        references.setdefault(caption_id.partition("#")[0], []).append(caption)
    return references


def _subset_files(root: Path, subset: str) -> Tuple[Path, Dict[str, List[str]], str]:
    """The AMT ratings file of ``subset``, the references per image file name and the references file's name."""
    if subset not in SUBSETS:
        raise InputError(f"benchmark 'composite': unknown subset {subset!r} (use {', '.join(SUBSETS)})")
    ratings_name, references_name = SUBSETS[subset]
    ratings_path = COMPOSITE.locate(root, [ratings_name])
    references_path = COMPOSITE.locate(root, [references_name])
    references = coco_references(references_path) if subset == "coco" else _token_references(references_path)
    return ratings_path, references, references_name


def _candidate_count(path: Path, fields: Sequence[str]) -> int:
    """How many candidates (``Input.text<k>`` columns) each HIT of an AMT ratings file holds."""
    count = sum(1 for field in fields if field.startswith("Input.text"))
    if "Input.image_url" not in fields or count == 0:
        raise BenchmarkFormatError(f"{path}: needs Input.image_url and Input.text1.. columns")
    return count


class _AmtReader:
    """Reads the AMT correctness files, counting the references removed, the rows skipped (without a complete HIT)
    and the human candidates that kept an image's only reference.

    By default a candidate loses the references equal to it. With ``drop_first_reference`` (TIGEr's protocol) the
    human candidate (``Input.text1``) loses the image's first reference in file order, whatever it says, and machine
    candidates keep all references; an image with a single reference keeps it (TIGEr's code would stack an empty
    list and raise)."""

    def __init__(self, root: Path, drop_first_reference: bool) -> None:
        self.root = root
        self.drop_first_reference = drop_first_reference
        self.removed = self.skipped = self.kept_single = 0

    def subset_items(self, subset: str) -> List[RatedItem]:
        """One item per rated candidate of ``subset``'s file, in file order."""
        ratings_path, references, references_name = _subset_files(self.root, subset)
        items = []
        for index, image, row, answers in self._hits(ratings_path):
            where = f"{ratings_path} row {index}"
            if image not in references:
                raise BenchmarkFormatError(f"{where}: image {image!r} has no references in {references_name}")
            for k, answer in enumerate(answers, 1):
                candidate = row[f"Input.text{k}"]
                items.append(
                    RatedItem(
                        image=image,
                        candidate=as_caption(candidate, f"{where} Input.text{k}"),
                        references=as_references(self._kept(references[image], candidate, k), f"{where} references"),
                        human=as_number(answer, f"{where} Answer.Q{k}Answer"),
                        key=f"{subset}#{index}#{k}",
                    )
                )
        return items

    def _hits(self, path: Path) -> Iterator[Tuple[int, str, Dict[str, str], List[Optional[str]]]]:
        """``(row index, image file name, row, answers)`` of every row holding a complete HIT."""
        with open(path, encoding="utf-8", errors="replace", newline="") as handle:
            reader = csv.DictReader(handle, delimiter=";")
            count = _candidate_count(path, reader.fieldnames or [])
            for index, row in enumerate(reader):
                url = (row.get("Input.image_url") or "").strip()
                answers = [row.get(f"Answer.Q{k}Answer") for k in range(1, count + 1)]
                if url and all(answer not in (None, "") for answer in answers):
                    yield index, url.rsplit("/", 1)[-1], row, answers
                else:
                    self.skipped += 1  # the AMT export ends with summary rows that hold no HIT

    def _kept(self, references: List[str], candidate: str, k: int) -> List[str]:
        """The references the candidate ``Input.text<k>`` is scored against."""
        if not self.drop_first_reference:
            kept = [reference for reference in references if reference != candidate]
        elif k == 1 and len(references) == 1:
            kept = references
            self.kept_single += 1
        else:
            kept = references[1:] if k == 1 else references
        self.removed += len(references) - len(kept)
        return kept


def _amt_items(root: Path, subsets: Sequence[str], drop_first_reference: bool) -> Tuple[List[RatedItem], int, int]:
    """Items of the AMT correctness files, the number of references removed, rows skipped; warns when
    ``drop_first_reference`` kept an image's only reference, giving their number."""
    reader = _AmtReader(root, drop_first_reference)
    items = [item for subset in subsets for item in reader.subset_items(subset)]
    if reader.kept_single:
        warnings.warn(f"benchmark 'composite': drop_first_reference kept the only reference of {reader.kept_single} "
                      "human candidate(s) (TIGEr's code raises there)", stacklevel=4)
    return items, reader.removed, reader.skipped


def _read_amt(folder: Path, subsets: Sequence[str], drop_first_reference: bool) -> ItemsRead:
    items, removed, skipped = _amt_items(folder, subsets, drop_first_reference)
    if drop_first_reference:
        kept = (f"all of them for machine candidates; for the human candidate (Input.text1) all but the first in "
                f"file order, as TIGEr's evaluation drops it ({removed} removed)")
    else:
        kept = (f"minus those equal to the candidate ({removed} removed: the rated human caption was drawn from "
                "the references)")
    description = (
        f"read from the AMT correctness files of subsets {', '.join(subsets)} in {folder} ({skipped} rows "
        "without a complete HIT skipped); each rated candidate is one item with its correctness rating (1-5); "
        f"references = the image's captions (Flickr8k / Flickr30k / COCO) {kept}"
    )
    return ItemsRead(items, f"amt:{folder}", description)


def _read_csv(folder: Path, drop_first_reference: bool) -> ItemsRead:
    if drop_first_reference:
        raise InputError("benchmark 'composite': drop_first_reference needs the AMT correctness files (the Polos "
                         "csv does not say which candidate is the human one)")
    path = COMPOSITE.locate(folder, ["en_test_composite_da.csv"])
    description = f"read from the Polos csv {path} (imgid, mt, refs, score) as distributed, references as listed"
    return ItemsRead(polos_csv_items(path), f"csv:{path}", description, str(path.parent / "images"))


def load_composite(
    root: Optional[PathLike],
    source: str,
    subsets: Sequence[str] = ("8k", "30k", "coco"),
    drop_first_reference: bool = False,
) -> Benchmark:
    """Composite's ``subsets`` (AMT files) or the Polos csv; ``drop_first_reference`` follows TIGEr's protocol."""
    COMPOSITE.check_source(source)
    if root is None:
        raise FileNotFoundError(f"benchmark 'composite' needs root=<folder>. {_HOW}")
    folder = Path(root)
    if source == "auto":
        amt_files = [folder / SUBSETS[subset][0] for subset in subsets if subset in SUBSETS]
        source = "amt" if any(path.is_file() for path in amt_files) else "csv"
    if source == "amt":
        read = _read_amt(folder, subsets, drop_first_reference)
    else:
        read = _read_csv(folder, drop_first_reference)
    protocol = (
        f"Composite (Aditya et al., 2015) as CLIPScore evaluates it: {read.description}. {len(read.items)} items. "
        "Texts whitespace-normalised. Report Kendall tau-c (primary) and tau-b of scipy.stats.kendalltau(metric, "
        "human) x 100."
    )
    return COMPOSITE.build(read.items, protocol, read.source, read.image_dir)

"""PASCAL-50S (Vedantam et al., 2015): caption pairs of PASCAL VOC images and the caption humans preferred."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, List, Optional, Sequence

from capeval.benchmarks.datasets.base import (Benchmark, BenchmarkFormatError, BenchmarkSpec, PairwiseItem, PathLike,
                                              as_caption, as_references, read_json)
from capeval.inputs import InputError

CATEGORIES = ("HC", "HI", "HM", "MM")
PASCAL50S = BenchmarkSpec(
    "pascal-50s",
    "pairwise",
    ("accuracy",),
    ("auto", "json"),
    "pascal_50s.json: {'HC'|'HI'|'HM'|'MM': [{'image', 'captions': [A, B], 'label', 'references'}]}; images are "
    "the PASCAL VOC JPEGImages.",
    "Vedantam, Zitnick and Parikh (2015), CIDEr: Consensus-based Image Description Evaluation, CVPR.",
)


def _item(entry: Any, category: str, index: int, where: str, references: Optional[int]) -> PairwiseItem:
    """The pair ``index`` of ``category``, keeping the first ``references`` references (all when ``None``)."""
    if not isinstance(entry, dict) or not {"image", "captions", "label", "references"} <= set(entry):
        raise BenchmarkFormatError(f"{where}: needs 'image', 'captions', 'label' and 'references'")
    captions = entry["captions"]
    if not isinstance(captions, list) or len(captions) != 2:
        raise BenchmarkFormatError(f"{where}: 'captions' must hold exactly two captions")
    if entry["label"] not in (0, 1) or isinstance(entry["label"], bool):
        raise BenchmarkFormatError(f"{where}: 'label' must be 0 or 1, found {entry['label']!r}")
    item_references = as_references(entry["references"], f"{where}['references']")
    if references is not None:
        if len(item_references) < references:
            raise BenchmarkFormatError(f"{where}: has {len(item_references)} references, {references} asked")
        item_references = item_references[:references]
    return PairwiseItem(
        image=os.path.basename(entry["image"]),
        candidates=(
            as_caption(captions[0], f"{where}['captions'][0]"), as_caption(captions[1], f"{where}['captions'][1]")
        ),
        references=item_references,
        label=int(entry["label"]),
        category=category,
        key=f"{category}#{index}",
    )


def _protocol(path: Path, items: Sequence[PairwiseItem], references: Optional[int]) -> str:
    counts = sorted({len(item.references) for item in items})
    kept = "all references of each pair as listed" if references is None else f"the first {references} of each pair"
    kept += f" ({' or '.join(map(str, counts))} per pair, one fixed set; the papers average 5 draws of 5 of the 48)"
    return (
        f"PASCAL-50S (Vedantam et al., 2015) from {path}: {len(items)} caption pairs in categories HC (two correct "
        "human captions), HI (human correct vs human incorrect), HM (human vs machine), MM (two machine captions); "
        "label = the caption preferred by the majority of the 48 human judgments (as stored in the file); "
        f"{kept}. Image = "
        "the file name of the VOC image. Accuracy = fraction of pairs where the metric scores the preferred caption "
        "strictly higher, per category and the mean of the four; how metric ties count is not specified by the "
        "papers (the statistics report how ties are counted)."
    )


def load_pascal50s(root: Optional[PathLike], source: str, references: Optional[int] = None) -> Benchmark:
    """PASCAL-50S with every pair of the four categories; ``references`` keeps the first ones of each pair."""
    PASCAL50S.check_source(source)
    path = PASCAL50S.locate(root, ["pascal_50s.json"])
    data = read_json(path)
    if not isinstance(data, dict) or set(data) - set(CATEGORIES):
        raise BenchmarkFormatError(f"{path}: expected an object with the categories {', '.join(CATEGORIES)}")
    if references is not None and references < 1:
        raise InputError(f"benchmark 'pascal-50s': references={references!r}, but it must be at least 1")
    items: List[PairwiseItem] = [
        _item(entry, category, index, f"{path} [{category!r}][{index}]", references)
        for category in CATEGORIES
        for index, entry in enumerate(data.get(category, []))
    ]
    return PASCAL50S.build(items, _protocol(path, items, references), f"json:{path}")

"""THumB 1.0 (Kasai et al., 2022): human scores of COCO captions of several systems and of a human."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Tuple

from capeval.benchmarks.datasets.base import (Benchmark, BenchmarkFormatError, BenchmarkSpec, PathLike, RatedItem,
                                              as_caption, as_number, as_references, read_jsonl)

THUMB = BenchmarkSpec(
    "thumb",
    "correlation",
    ("pearson", "kendall_tau_c", "kendall_tau_b"),
    ("auto", "jsonl"),
    "THumB 1.0 (Kasai et al., 2022): pass root=<folder> holding mscoco_THumB-1.0.jsonl and mscoco_references.json "
    "(JSON lines {seg_id, refs}) from jungokasai/THumB; images are COCO val2014 (Karpathy test split).",
    "Kasai et al. (2022), Transparent Human Evaluation for Image Captioning, NAACL.",
)


def _references(path: Path) -> Dict[str, Tuple[str, ...]]:
    """The references of every ``seg_id`` of the JSON lines ``{seg_id, refs}``."""
    references = {}
    for index, row in enumerate(read_jsonl(path)):
        if "seg_id" not in row or "refs" not in row:
            raise BenchmarkFormatError(f"{path} line {index + 1}: needs seg_id and refs")
        references[str(row["seg_id"])] = as_references(row["refs"], f"{path} seg_id {row['seg_id']!r}")
    return references


def _items(scores_path: Path, references_path: Path, include_human: bool) -> List[RatedItem]:
    """One item per scored (image, system), the 'Human' system's only with ``include_human``."""
    references = _references(references_path)
    items = []
    for index, row in enumerate(read_jsonl(scores_path)):
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
                candidate=as_caption(row["hyp"], f"{where} hyp"),
                references=references[seg_id],
                human=as_number(row["human_score"], f"{where} human_score"),
                key=f"{seg_id}#{row['SYS']}",
            )
        )
    return items


def load_thumb(root: Optional[PathLike], source: str, include_human: bool = True) -> Benchmark:
    """THumB 1.0 with every system, the 'Human' one only with ``include_human``."""
    THUMB.check_source(source)
    scores_path = THUMB.locate(root, ["mscoco_THumB-1.0.jsonl"])
    references_path = THUMB.locate(scores_path.parent, ["mscoco_references.json", "mscoco_references.jsonl"])
    items = _items(scores_path, references_path, include_human)
    human = "including" if include_human else "excluding"
    protocol = (
        f"THumB 1.0 (Kasai et al., 2022) from {scores_path}: one item per (image, system) {human} the 'Human' "
        f"system, {len(items)} items; human score = human_score = (P + R) / 2 + fluency, conciseness and "
        f"inclusive-language penalties; references = the image's COCO captions from {references_path.name} (the "
        "rated Human caption is not among them). Texts whitespace-normalised. Report Pearson r (primary, as THumB "
        "reports) and Kendall tau-c / tau-b x 100."
    )
    return THUMB.build(items, protocol, f"jsonl:{scores_path}")

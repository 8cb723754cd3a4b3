"""FOIL-COCO (Shekhar et al., 2017): COCO captions paired with the foil captions made from them by replacing one
word."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from capeval.benchmarks.datasets.base import (Benchmark, BenchmarkFormatError, BenchmarkSpec, FoilItem, PathLike,
                                              as_caption, as_references, coco_references, read_json)
from capeval.inputs import InputError

FOIL = BenchmarkSpec(
    "foil",
    "foil",
    ("accuracy",),
    ("auto", "json"),
    "FOIL-COCO (Shekhar et al., 2017): pass root=<folder> holding foilv1.0_test_2017.json and the COCO "
    "captions_val2014.json (references); images are COCO val2014.",
    "Shekhar et al. (2017), FOIL it! Find One mismatch between Image and Language caption, ACL.",
)

Group = Dict[str, List[Dict[str, Any]]]
"""The annotations of one caption id: its original caption(s) under ``"orig"``, its foils under ``"foil"``."""


def _groups(foil_path: Path) -> Tuple[Dict[Any, str], Dict[Any, Group]]:
    """The image file name of every image id, and the annotations of every caption id in first-seen order."""
    data = read_json(foil_path)
    try:
        names = {image["id"]: image["file_name"] for image in data["images"]}
        annotations = data["annotations"]
    except (KeyError, TypeError):
        raise BenchmarkFormatError(f"{foil_path}: needs 'images' (id, file_name) and 'annotations'") from None
    groups: Dict[Any, Group] = {}
    for index, annotation in enumerate(annotations):
        if not {"id", "image_id", "caption", "foil"} <= set(annotation):
            raise BenchmarkFormatError(f"{foil_path} annotations[{index}]: needs id, image_id, caption and foil")
        group = groups.setdefault(annotation["id"], {"orig": [], "foil": []})
        group["foil" if annotation["foil"] else "orig"].append(annotation)
    return names, groups


def _original(foil_path: Path, group_id: Any, group: Group, names: Dict[Any, str]) -> Tuple[Dict[str, Any], str]:
    """The original annotation of a caption id and its image file name."""
    if len(group["orig"]) != 1:
        raise BenchmarkFormatError(
            f"{foil_path}: caption id {group_id!r} has {len(group['orig'])} original captions (expected 1)"
        )
    original = group["orig"][0]
    if original["image_id"] not in names:
        raise BenchmarkFormatError(f"{foil_path}: image id {original['image_id']!r} is not in 'images'")
    return original, names[original["image_id"]]


class _PairReader:
    """Turns the caption ids of a FOIL file into pairs of items, each with the first ``references`` COCO captions of
    the image other than the original caption."""

    def __init__(self, foil_path: Path, coco_path: Path, references: int) -> None:
        self.foil_path = foil_path
        self.coco_path = coco_path
        self.coco = coco_references(coco_path)
        self.references = references

    def items(self, group_id: Any, group: Group, names: Dict[Any, str]) -> List[FoilItem]:
        """The original and the foil item of every foil of caption id ``group_id``."""
        original, image = _original(self.foil_path, group_id, group, names)
        references = self._references(image, original["caption"])
        items = []
        for number, foil in enumerate(group["foil"]):
            pair = f"{group_id}#{number}"
            for annotation, is_foil in ((original, False), (foil, True)):
                items.append(
                    FoilItem(
                        image=image,
                        candidate=as_caption(annotation["caption"], f"{self.foil_path} caption id {group_id!r}"),
                        references=references,
                        is_foil=is_foil,
                        key=f"{pair}#{'foil' if is_foil else 'orig'}",
                        pair=pair,
                    )
                )
        return items

    def _references(self, image: str, original: str) -> Tuple[str, ...]:
        pool = [caption for caption in self.coco.get(image, []) if caption != original]
        if len(pool) < self.references:
            raise BenchmarkFormatError(
                f"{self.foil_path}: image {image!r} has {len(pool)} COCO references besides the original caption, "
                f"{self.references} needed"
            )
        return as_references(pool[: self.references], f"{self.coco_path} references of {image!r}")


def load_foil(root: Optional[PathLike], source: str, references: int = 4) -> Benchmark:
    """FOIL's test split: every foil caption paired with its original; ``references`` is 1 or 4."""
    FOIL.check_source(source)
    if references not in (1, 4):
        raise InputError(f"benchmark 'foil': references={references!r}, but it must be 1 or 4")
    foil_path = FOIL.locate(root, ["foilv1.0_test_2017.json"])
    reader = _PairReader(foil_path, FOIL.locate(foil_path.parent, ["captions_val2014.json"]), references)
    names, groups = _groups(foil_path)
    items = [item for group_id, group in groups.items() for item in reader.items(group_id, group, names)]
    protocol = (
        f"FOIL (Shekhar et al., 2017) test split from {foil_path}: every foil caption is paired with the original "
        f"COCO caption it was made from ({len(items) // 2} pairs, two items per pair sharing 'pair'); references = "
        f"the first {references} COCO captions of the image (captions_val2014.json order) other than the original "
        "caption. Accuracy = fraction of pairs where the metric scores the original caption strictly higher than "
        "the foil (CLIPScore and PAC-S report it with 1 and with 4 references; PAC-S used an 8k-image subset not "
        "overlapping its training data)."
    )
    return FOIL.build(items, protocol, f"json:{foil_path}")

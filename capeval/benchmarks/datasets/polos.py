"""The record layout of the Polos / DENEB evaluation files (``imgid``, ``mt``, ``refs``, ``score``), as a csv (Polos'
``en_test_composite_da.csv``, ``polaris_<split>.csv``) or a JSON list (``polaris_test.json``, ``nebula_test.json``)."""
from __future__ import annotations

import ast
import csv
import io
from pathlib import Path
from typing import Any, Dict, List

from capeval.benchmarks.datasets.base import (BenchmarkFormatError, RatedItem, as_caption, as_number, as_references,
                                              read_json)
from capeval.inputs import read_utf8

COLUMNS = {"imgid", "mt", "refs", "score"}


def _item(row: Dict[str, Any], references: Any, index: int, where: str, image: str) -> RatedItem:
    """One rated candidate (``mt``, ``refs``, ``score``; image named ``image``)."""
    return RatedItem(
        image=image,
        candidate=as_caption(row["mt"], f"{where} 'mt'"),
        references=as_references(references, f"{where} 'refs'"),
        human=as_number(row["score"], f"{where} 'score'"),
        key=f"{row['imgid']}#{index}",
    )


def polos_csv_items(path: Path) -> List[RatedItem]:
    """Items of a csv in the Polos / DENEB layout: ``imgid``, ``mt``, ``refs`` (a Python list literal), ``score``."""
    items = []
    with io.StringIO(read_utf8(path), newline="") as handle:
        reader = csv.DictReader(handle)
        missing = COLUMNS - set(reader.fieldnames or [])
        if missing:
            raise BenchmarkFormatError(f"{path}: missing column(s) {', '.join(sorted(missing))}")
        for index, row in enumerate(reader):
            where = f"{path} row {index}"
            try:
                references = ast.literal_eval(row["refs"])
            except (ValueError, SyntaxError):
                raise BenchmarkFormatError(f"{where}: 'refs' is not a list literal: {row['refs']!r}") from None
            items.append(_item(row, references, index, where, row["imgid"]))
    return items


def polos_json_items(path: Path) -> List[RatedItem]:
    """Items of a JSON list of ``{"imgid", "mt", "refs", "score"}`` records, the layout that evaluation scripts of
    later metrics distribute (``polaris_test.json``, ``nebula_test.json``); the image is ``<imgid>.jpg`` (``imgid``
    as it is when it already ends in an image suffix), as those scripts name it."""
    records = read_json(path)
    if not isinstance(records, list):
        raise BenchmarkFormatError(f"{path}: expected a JSON list of {{imgid, mt, refs, score}} records, "
                                   f"found {type(records).__name__}")
    items = []
    for index, row in enumerate(records):
        where = f"{path} entry {index}"
        if not isinstance(row, dict):
            raise BenchmarkFormatError(f"{where}: expected an object, found {type(row).__name__}")
        missing = COLUMNS - set(row)
        if missing:
            raise BenchmarkFormatError(f"{where}: missing key(s) {', '.join(sorted(missing))}")
        imgid = str(row["imgid"])
        image = imgid if Path(imgid).suffix.lower() in (".jpg", ".jpeg", ".png") else f"{imgid}.jpg"
        items.append(_item(row, row["refs"], index, where, image))
    return items

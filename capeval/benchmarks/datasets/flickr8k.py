"""Flickr8k-Expert and Flickr8k-CF (Hodosh et al., 2013), read from the release's text files or from the json files
that jmhessel/clipscore's ``flickr8k_example/download.py`` builds."""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from capeval.benchmarks.datasets.base import (Benchmark, BenchmarkFormatError, BenchmarkSpec, ItemsRead, PathLike,
                                              RatedItem, as_caption, as_number, as_references, normalize_whitespace,
                                              read_json, tab_rows)

_HOW = (
    "Get Flickr8k_text.zip (ExpertAnnotations.txt, CrowdFlowerAnnotations.txt, Flickr8k.token.txt) from the "
    "Flickr8k release, or build flickr8k.json / crowdflower_flickr8k.json with jmhessel/clipscore's "
    "flickr8k_example/download.py."
)
_CITATION = (
    "Hodosh, Young and Hockenmaier (2013), Framing Image Description as a Ranking Task: Data, Models and "
    "Evaluation Metrics, JAIR 47."
)
_SOURCES = ("auto", "text", "json")
EXPERT = BenchmarkSpec("flickr8k-expert", "correlation", ("kendall_tau_c", "kendall_tau_b"), _SOURCES, _HOW, _CITATION)
CROWDFLOWER = BenchmarkSpec("flickr8k-cf", "correlation", ("kendall_tau_b", "kendall_tau_c"), _SOURCES, _HOW, _CITATION)
TOKEN_FILE = "Flickr8k.token.txt"


def _references(token_file: Path) -> Tuple[Dict[str, List[str]], Dict[str, str]]:
    """Reference lists per image file name (file order) and the caption of every ``image#k`` caption id."""
    references: Dict[str, List[str]] = {}
    captions: Dict[str, str] = {}
    for line_number, (caption_id, caption) in tab_rows(token_file, 2):
        image, separator, _ = caption_id.partition("#")
        if not separator:
            raise BenchmarkFormatError(f"{token_file}:{line_number}: caption id {caption_id!r} is not image#k")
        references.setdefault(image, []).append(caption)
        captions[caption_id] = caption
    return references, captions


def _caption_of(captions: Dict[str, str], caption_id: str, where: str) -> str:
    if caption_id not in captions:
        raise BenchmarkFormatError(f"{where}: caption id {caption_id!r} is not in {TOKEN_FILE}")
    return captions[caption_id]


def _references_of(references: Dict[str, List[str]], image: str, where: str) -> List[str]:
    if image not in references:
        raise BenchmarkFormatError(f"{where}: image {image!r} has no references in {TOKEN_FILE}")
    return references[image]


def _grouped_by_image(items: List[RatedItem]) -> List[RatedItem]:
    """``items`` grouped by image, images in first-seen order, items of one image in their own order."""
    groups: Dict[str, List[RatedItem]] = {}
    for item in items:
        groups.setdefault(item.image, []).append(item)
    return [item for group in groups.values() for item in group]


def _read_expert_text(root: Path) -> ItemsRead:
    """Items of ExpertAnnotations.txt, grouped by image (first-seen order), without the candidates that are one of
    their image's references."""
    references, captions = _references(root / TOKEN_FILE)
    annotations = root / "ExpertAnnotations.txt"
    items: List[RatedItem] = []
    skipped = 0
    for line_number, (image, caption_id, *ratings) in tab_rows(annotations, 5):
        where = f"{annotations}:{line_number}"
        caption = _caption_of(captions, caption_id, where)
        image_references = _references_of(references, image, where)
        if caption in image_references:
            skipped += 1
            continue
        normalized_references = tuple(normalize_whitespace(reference) for reference in image_references)
        items.extend(
            RatedItem(
                image=image,
                candidate=normalize_whitespace(caption),
                references=normalized_references,
                human=as_number(rating, f"{where} (expert {rater})"),
                key=f"{image}#{caption_id}#{rater}",
            )
            for rater, rating in enumerate(ratings, 1)
        )
    description = (
        f"read from ExpertAnnotations.txt and {TOKEN_FILE} in {root}; {skipped} (image, candidate) pairs "
        "whose candidate text equals one of that image's references were dropped"
    )
    return ItemsRead(_grouped_by_image(items), f"text:{root}", description)


def _crowdflower_rows(
    annotations: Path, references: Dict[str, List[str]], captions: Dict[str, str]
) -> Tuple[List[Tuple[str, str, str, float]], Dict[str, List[str]], int]:
    """``(image, caption id, caption, fraction of yes)`` of every row, the reference list left to each image and
    how many references were removed in all.

    One reference list per image, shared by all of its candidates: each judged candidate text removes the first
    reference equal to it (a text listed twice among the references loses one copy per candidate)."""
    rows = []
    remaining: Dict[str, List[str]] = {}
    removed = 0
    for line_number, (image, caption_id, fraction_yes, _, _) in tab_rows(annotations, 5):
        where = f"{annotations}:{line_number}"
        caption = _caption_of(captions, caption_id, where)
        if image not in remaining:
            remaining[image] = list(_references_of(references, image, where))
        if caption in remaining[image]:
            remaining[image].remove(caption)
            removed += 1
        rows.append((image, caption_id, caption, as_number(fraction_yes, f"{where} (fraction of yes)")))
    return rows, remaining, removed


def _read_crowdflower_text(root: Path) -> ItemsRead:
    """Items of CrowdFlowerAnnotations.txt, grouped by image (first-seen order), with the references left after the
    removal of the judged candidates' texts."""
    references, captions = _references(root / TOKEN_FILE)
    annotations = root / "CrowdFlowerAnnotations.txt"
    rows, remaining, removed = _crowdflower_rows(annotations, references, captions)
    items = []
    for image, caption_id, caption, fraction_yes in rows:
        if not remaining[image]:
            raise BenchmarkFormatError(f"{annotations}: image {image!r} has no reference left after the removal")
        items.append(
            RatedItem(
                image=image,
                candidate=normalize_whitespace(caption),
                references=tuple(normalize_whitespace(reference) for reference in remaining[image]),
                human=fraction_yes,
                key=f"{image}#{caption_id}",
            )
        )
    description = (
        f"read from CrowdFlowerAnnotations.txt and {TOKEN_FILE} in {root}; every row is kept; each image "
        "has ONE reference list, its Flickr8k captions minus, for every judged candidate of that image (file "
        "order), the first reference whose text equals the candidate text "
        f"({removed} references removed), as clipscore's download.py builds crowdflower_flickr8k.json"
    )
    return ItemsRead(_grouped_by_image(items), f"text:{root}", description)


def _json_entry(entry: Any, where: str) -> Tuple[str, Tuple[str, ...], list]:
    """The image file name, references and judgements of one image of a clipscore ``download.py`` json."""
    try:
        image = os.path.basename(entry["image_path"])
        references = as_references(entry["ground_truth"], f"{where}['ground_truth']")
        judgements = entry["human_judgement"]
    except (KeyError, TypeError) as error:
        raise BenchmarkFormatError(
            f"{where}: needs 'image_path', 'ground_truth' and 'human_judgement' ({error!r})"
        ) from None
    return image, references, judgements


def _read_clipscore_json(path: Path) -> ItemsRead:
    """Items of a clipscore ``download.py`` json (image order of the file), NaN ratings dropped."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise BenchmarkFormatError(f"{path}: expected an object keyed by image id")
    items: List[RatedItem] = []
    dropped = 0
    for image_key, entry in data.items():
        where = f"{path} [{image_key!r}]"
        image, references, judgements = _json_entry(entry, where)
        for index, judgement in enumerate(judgements):
            entry_where = f"{where}['human_judgement'][{index}]"
            if not isinstance(judgement, dict) or "caption" not in judgement or "rating" not in judgement:
                raise BenchmarkFormatError(f"{entry_where}: needs 'caption' and 'rating'")
            rating = as_number(judgement["rating"], entry_where)
            if math.isnan(rating):
                dropped += 1
                continue
            items.append(
                RatedItem(
                    image=image,
                    candidate=as_caption(judgement["caption"], entry_where),
                    references=references,
                    human=rating,
                    key=f"{image}#{index}",
                )
            )
    description = f"read from the clipscore download.py json {path} ({dropped} NaN ratings dropped)"
    return ItemsRead(items, f"json:{path}", description)


def _read(
    spec: BenchmarkSpec,
    root: Optional[PathLike],
    source: str,
    text_file: str,
    json_file: str,
    read_text: Callable[[Path], ItemsRead],
) -> ItemsRead:
    """Items of the text folder (read by ``read_text``) or of the clipscore json, as ``source`` ("auto", "text" or
    "json") and the files at ``root`` say."""
    spec.check_source(source)
    if root is None:
        raise FileNotFoundError(
            f"benchmark {spec.name!r} needs root=<folder> (the Flickr8k text folder or {json_file}). {_HOW}"
        )
    path = Path(root)
    if source in ("auto", "text") and path.is_dir() and (path / text_file).is_file():
        if not (path / TOKEN_FILE).is_file():
            raise FileNotFoundError(f"{TOKEN_FILE} not found in {str(path)!r}. {_HOW}")
        return read_text(path)
    if source == "text":
        raise FileNotFoundError(f"{text_file} not found in {str(path)!r}. {_HOW}")
    return _read_clipscore_json(spec.locate(path, [json_file]))


def load_expert(root: Optional[PathLike], source: str) -> Benchmark:
    """Flickr8k-Expert: one item per expert rating of a candidate that is not one of its image's references."""
    read = _read(EXPERT, root, source, "ExpertAnnotations.txt", "flickr8k.json", _read_expert_text)
    protocol = (
        f"Flickr8k-Expert (Hodosh et al., 2013) as CLIPScore and PAC-S evaluate it: {read.description}. Each "
        "remaining (image, candidate) pair appears once per expert rating (three experts, ratings 1-4), flattened "
        f"to {len(read.items)} items (16,992 for the full release); human score = that rating. References = all "
        "five Flickr8k captions of the image. Texts whitespace-normalised. Report Kendall tau-c (primary) and tau-b "
        "of scipy.stats.kendalltau(metric, human) x 100."
    )
    return EXPERT.build(read.items, protocol, read.source)


def load_crowdflower(root: Optional[PathLike], source: str) -> Benchmark:
    """Flickr8k-CF: one item per CrowdFlower-judged candidate, human score the fraction of 'yes' votes."""
    read = _read(CROWDFLOWER, root, source, "CrowdFlowerAnnotations.txt", "crowdflower_flickr8k.json",
                 _read_crowdflower_text)
    protocol = (
        f"Flickr8k-CF (Hodosh et al., 2013) as CLIPScore and PAC-S evaluate it: {read.description}. Human score = "
        f"fraction of 'yes' votes; {len(read.items)} items (47,830 for the full release). Texts "
        "whitespace-normalised. Report Kendall tau-b (primary, following Cui et al. 2018 and CLIPScore) and tau-c "
        "of scipy.stats.kendalltau(metric, human) x 100."
    )
    return CROWDFLOWER.build(read.items, protocol, read.source)

"""VATEX-EVAL (Shi et al., 2022): 18,000 captions of 3,000 VATEX validation videos, each rated by three humans, read
from the release the EMScore authors distribute exactly as their ``VATEX-EVAL-demo.py`` reads it."""
from __future__ import annotations

import numbers
from pathlib import Path
from typing import Any, List, Optional, Tuple

import numpy as np

from capeval.benchmarks.datasets.base import (Benchmark, BenchmarkFormatError, BenchmarkSpec, PathLike, RatedVideoItem,
                                              VideoSetup, as_text_list, feature_files, read_json, read_pickle)
from capeval.inputs import InputError

CANDIDATES = "candidates_list.pkl"
REFERENCES = "gts_list.pkl"
HUMAN_SCORES = "human_scores.pkl"
VIDEO_IDS = "video_ids.pkl"
FEATURES = "VATEX-EVAL_video_feats"
IDF_CORPUS = "vatex_train_en_annotations.json"
RATERS = 3
NUM_FRAMES = 10
"""The demo's ``use_uniform_sample``: frames kept of each video's features."""

VATEX_EVAL = BenchmarkSpec(
    "vatex-eval",
    "video_correlation",
    ("kendall_tau_b", "spearman"),
    ("auto", "pickle"),
    f"VATEX-EVAL (Shi et al., 2022): pass root=<folder>, the folder of the release the EMScore authors distribute "
    f"(linked from the ShiYaya/emscore README): {CANDIDATES}, {REFERENCES}, {HUMAN_SCORES}, {VIDEO_IDS}, the frame "
    f"features {FEATURES}/<video id>.pt and VATEX's training captions {IDF_CORPUS}.",
    "Shi, Yang, Xu, Yuan, Li, Hu and Zha (2022), EMScore: Evaluating Video Captioning via Coarse-Grained and "
    "Fine-Grained Embedding Matching, CVPR.",
)


def _human_scores(path: Path, count: int) -> np.ndarray:
    """``(count, RATERS)`` scores: the file's array reshaped to ``(RATERS, -1)`` and transposed, as the demo does."""
    try:
        scores = np.asarray(read_pickle(path), dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise BenchmarkFormatError(f"{path}: expected an array of numbers ({error})") from None
    if scores.size != RATERS * count:
        raise BenchmarkFormatError(
            f"{path}: holds {scores.size} scores (shape {scores.shape}); {RATERS} raters x {count} candidates = "
            f"{RATERS * count} expected"
        )
    per_item = scores.reshape(RATERS, -1).T
    bad = np.flatnonzero(~np.isfinite(per_item).all(axis=1))
    if bad.size:
        raise BenchmarkFormatError(
            f"{path}: the scores of item {bad[0]} are not all finite: {per_item[bad[0]].tolist()}"
        )
    return per_item


def _references(path: Path, count: int, kept: int) -> List[Tuple[str, ...]]:
    """The first ``kept`` references of each of the ``count`` items (the demo's ``np.array(refs)[:, :kept]``)."""
    value = read_pickle(path)
    rows = value.tolist() if isinstance(value, np.ndarray) else value
    if not isinstance(rows, list) or len(rows) != count:
        found = f"{len(rows)} rows" if isinstance(rows, list) else f"a {type(value).__name__}"
        raise BenchmarkFormatError(f"{path}: expected one row of references per candidate ({count}), found {found}")
    references = []
    for index, row in enumerate(rows):
        texts = as_text_list(row, f"{path} row {index}")
        if len(texts) < kept:
            raise BenchmarkFormatError(f"{path} row {index}: holds {len(texts)} references, {kept} asked")
        references.append(tuple(texts[:kept]))
    return references


def _idf_corpus(path: Path) -> Tuple[str, ...]:
    """Every caption of the training annotations, video after video in file order (the demo's corpus)."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise BenchmarkFormatError(f"{path}: expected an object of caption lists keyed by video id")
    corpus: List[str] = []
    for video, captions in data.items():
        corpus.extend(as_text_list(captions, f"{path} [{video!r}]"))
    return tuple(corpus)


def _check_features(folder: Path, videos: List[str], ids_path: Path) -> None:
    """Raise unless every video of ``videos`` has its feature file in ``folder``, naming the first missing ones."""
    available = feature_files(folder)
    missing = [(index, video) for index, video in enumerate(videos) if video not in available]
    if missing:
        distinct = sorted({video for _, video in missing})
        shown = ", ".join(f"item {index} ({video!r})" for index, video in missing[:3])
        raise BenchmarkFormatError(
            f"{folder}: {len(distinct)} video(s) of {ids_path} have no feature file <video id>.pt: {shown}"
            + (", ..." if len(missing) > 3 else "")
        )


def _check_references(references: Any) -> int:
    if isinstance(references, bool) or not isinstance(references, numbers.Integral) or references < 0:
        raise InputError(f"benchmark 'vatex-eval': references={references!r}, but it must be a whole number of at "
                         "least 0 (the papers use 0, 1 or 9)")
    return int(references)


def load_vatex_eval(root: Optional[PathLike], source: str, references: int = 1) -> Benchmark:
    """VATEX-EVAL: one item per candidate caption with its three raters' scores and its first ``references``
    references (0, 1 or 9 in the papers; 1 is the demo's default)."""
    VATEX_EVAL.check_source(source)
    kept = _check_references(references)
    folder = VATEX_EVAL.folder(root)
    candidates_path, ids_path = VATEX_EVAL.locate(folder, [CANDIDATES]), VATEX_EVAL.locate(folder, [VIDEO_IDS])
    candidates = as_text_list(read_pickle(candidates_path), str(candidates_path))
    videos = as_text_list(read_pickle(ids_path), str(ids_path))
    if len(videos) != len(candidates):
        raise BenchmarkFormatError(f"{ids_path}: holds {len(videos)} video ids for {len(candidates)} candidates")
    human = _human_scores(VATEX_EVAL.locate(folder, [HUMAN_SCORES]), len(candidates))
    item_references = _references(VATEX_EVAL.locate(folder, [REFERENCES]), len(candidates), kept)
    features = folder / FEATURES
    _check_features(features, videos, ids_path)
    corpus = _idf_corpus(VATEX_EVAL.locate(folder, [IDF_CORPUS]))
    items = [
        RatedVideoItem(video=video, candidate=candidate, references=refs, human=tuple(scores.tolist()),
                       key=f"{video}#{index}")
        for index, (video, candidate, refs, scores) in enumerate(zip(videos, candidates, item_references, human))
    ]
    protocol = (
        f"VATEX-EVAL (Shi et al., 2022) read from {folder} as the EMScore authors' VATEX-EVAL-demo.py reads it: "
        f"{len(items)} candidate captions ({CANDIDATES}) of {len(set(videos))} videos ({VIDEO_IDS}), each with the "
        f"scores of {RATERS} raters ({HUMAN_SCORES} reshaped to ({RATERS}, -1) and transposed: rater r's scores are "
        f"the r-th third of the file) and the first {kept} of its references ({REFERENCES}"
        f"{'; the metrics get none' if kept == 0 else ''}). Videos: the frame features {FEATURES}/<video id>.pt, "
        f"{NUM_FRAMES} frames kept of each at np.linspace(0, T - 1, {NUM_FRAMES}) cast to int. IDF: the "
        f"{len(corpus)} captions of {IDF_CORPUS}, video after video in file order. Texts as released. Statistics as "
        "the demo's compute_correlation_uniquehuman: the scores rounded to 4 decimals (as float32, the reference's "
        "scores), Kendall tau-b (scipy.stats.kendalltau) and Spearman rho (scipy.stats.spearmanr) with each rater's "
        "scores, each averaged over the raters and rounded to 4 decimals. The PAC-S paper (Table 3) reports "
        "EMScore / PAC-S with no references and EMScore(X,V,X*) / RefPAC-S with 1 and 9."
    )
    setup = VideoSetup(str(features), NUM_FRAMES, corpus)
    return VATEX_EVAL.build(items, protocol, f"pickle:{folder}", video=setup)

"""ActivityNet-FOIL (Shi et al., 2022): paragraphs describing ActivityNet videos segment by segment, each with a foil
in which a noun phrase names something the video does not show, read from the release the EMScore authors distribute
exactly as their ``ActivityNet-FOIL_demo.py`` reads it."""
from __future__ import annotations

import numbers
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from capeval.benchmarks.datasets.base import (Benchmark, BenchmarkFormatError, BenchmarkSpec, ParagraphItem, PathLike,
                                              VideoSetup, as_text_list, feature_files, read_json)

CORRECT = "final_right_video_sentences.json"
FOILED = "final_foil_video_sentences.json"
SEGMENTS = "anet_entities_test_1.json"
"""The annotation whose paragraphs the correct ones are: each sentence's segment (by its position)."""
OTHER_PARAGRAPHS = "anet_entities_test_2.json"
"""The video's second annotation: the references."""
TRAIN = "train.json"
FEATURES = "ActivityNet-FOIL_video_feats"
MAX_IDF_WORDS = 66
"""Training sentences of more space-separated words are left out of the IDF corpus, as the demo leaves them out."""
OVERLAP = 0.4

ACTIVITYNET_FOIL = BenchmarkSpec(
    "activitynet-foil",
    "video_foil",
    ("accuracy",),
    ("auto", "json"),
    f"ActivityNet-FOIL (Shi et al., 2022): pass root=<folder>, the folder of the release the EMScore authors "
    f"distribute (linked from the ShiYaya/emscore README): {CORRECT}, {FOILED}, {SEGMENTS}, {OTHER_PARAGRAPHS}, "
    f"{TRAIN} and the frame features {FEATURES}/<video id>.pt.",
    "Shi, Yang, Xu, Yuan, Li, Hu and Zha (2022), EMScore: Evaluating Video Captioning via Coarse-Grained and "
    "Fine-Grained Embedding Matching, CVPR.",
    ties="wrong",
)

Timestamp = Tuple[float, float]


def segment_frames(timestamp: Timestamp, frame_count: int, duration: float) -> range:
    """The feature rows the demo slices for the segment ``timestamp`` (seconds) of a video of ``frame_count`` rows
    lasting ``duration`` seconds: ``feats[int(t0 * frame_count // duration):int(t1 * frame_count // duration)]``,
    with Python's floor division and slicing (an index past the end is clipped, a negative one counts from the end)."""
    start = timestamp[0] * frame_count // duration
    end = timestamp[1] * frame_count // duration
    return range(frame_count)[int(start):int(end)]


def overlapping_references(timestamp: Timestamp,
                           reference_timestamps: Sequence[Timestamp]) -> Tuple[List[int], List[int]]:
    """The references of a sentence by the demo's ``use_ref_timestamps``, and the reference segments that are empty.

    With ``a, b`` and ``c, d`` the int-truncated ends of the sentence's and a reference's segment, the reference is
    kept when the whole seconds ``c..d`` it shares with ``a..b`` are more than 40% of ``c..d``; when none is kept,
    all are. A reference with ``d < c`` has no whole second (the demo divides by zero there): the rule never keeps it
    (only all the others with it)."""
    a, b = int(timestamp[0]), int(timestamp[1])
    kept: List[int] = []
    empty: List[int] = []
    for index, (start, end) in enumerate(reference_timestamps):
        c, d = int(start), int(end)
        length = len(range(c, d + 1))
        if length == 0:
            empty.append(index)
            continue
        if len(range(max(a, c), min(b, d) + 1)) / length > OVERLAP:
            kept.append(index)
    return (kept or list(range(len(reference_timestamps)))), empty


def _paragraphs(path: Path) -> Dict[str, List[str]]:
    """The sentences of every paragraph of a predictions file ``{"results": {video: [{"sentence": ...}, ...]}}``."""
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict):
        raise BenchmarkFormatError(f"{path}: expected an object whose 'results' maps video ids to sentence lists")
    paragraphs = {}
    for video, segments in data["results"].items():
        where = f"{path} ['results'][{video!r}]"
        if not isinstance(segments, list) or not all(isinstance(segment, dict) for segment in segments):
            raise BenchmarkFormatError(f"{where}: expected a list of {{'sentence': ...}} objects")
        paragraphs[video] = as_text_list([segment.get("sentence") for segment in segments], f"{where} sentence")
    return paragraphs


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise BenchmarkFormatError(f"{where}: expected a number, found {value!r}")
    return value  # type: ignore[return-value]  # int or float as in the file: the demo computes with them as they are


def _timestamps(entry: Dict[str, Any], where: str) -> List[Timestamp]:
    values = entry.get("timestamps")
    if not isinstance(values, list):
        raise BenchmarkFormatError(f"{where}: expected 'timestamps', a list of [start, end] pairs")
    pairs = []
    for index, pair in enumerate(values):
        if not isinstance(pair, list) or len(pair) != 2:
            raise BenchmarkFormatError(f"{where}['timestamps'][{index}]: expected [start, end], found {pair!r}")
        pairs.append((_number(pair[0], f"{where}['timestamps'][{index}]"),
                      _number(pair[1], f"{where}['timestamps'][{index}]")))
    return pairs


class _Annotations:
    """The two ActivityNet Entities annotations of the videos: segments, references and durations."""

    def __init__(self, folder: Path) -> None:
        self.segments_path = ACTIVITYNET_FOIL.locate(folder, [SEGMENTS])
        self.others_path = ACTIVITYNET_FOIL.locate(folder, [OTHER_PARAGRAPHS])
        self.segments = self._read(self.segments_path)
        self.others = self._read(self.others_path)
        self.empty_references: Set[Tuple[str, int]] = set()
        """The (video, index) of every reference segment that ends before it starts."""

    @staticmethod
    def _read(path: Path) -> Dict[str, Any]:
        data = read_json(path)
        if not isinstance(data, dict) or not all(isinstance(entry, dict) for entry in data.values()):
            raise BenchmarkFormatError(f"{path}: expected an object of annotations keyed by video id")
        return data

    def _entry(self, path: Path, data: Dict[str, Any], video: str) -> Dict[str, Any]:
        if video not in data:
            raise BenchmarkFormatError(f"{path}: has no annotation of video {video!r}")
        return data[video]

    def _duration(self, video: str) -> float:
        """The second annotation's duration of ``video`` (the demo reads the durations of both, the second last)."""
        where = f"{self.others_path} [{video!r}]"
        value = _number(self._entry(self.others_path, self.others, video).get("duration"), f"{where}['duration']")
        if not value > 0:
            raise BenchmarkFormatError(f"{where}: duration must be positive, found {value!r}")
        return value

    def item(self, video: str, sentences: List[str], is_foil: bool, where: str) -> ParagraphItem:
        """A paragraph of ``video``: sentence ``i`` gets the first annotation's segment ``i`` and the references of
        the second annotation chosen by :func:`overlapping_references`."""
        segments_where = f"{self.segments_path} [{video!r}]"
        segments = _timestamps(self._entry(self.segments_path, self.segments, video), segments_where)
        if len(segments) < len(sentences):
            raise BenchmarkFormatError(f"{where} [{video!r}]: {len(sentences)} sentences but {segments_where} has "
                                       f"{len(segments)} segments")
        other = self._entry(self.others_path, self.others, video)
        others_where = f"{self.others_path} [{video!r}]"
        other_segments = _timestamps(other, others_where)
        other_sentences = as_text_list(other.get("sentences"), f"{others_where}['sentences']")
        if not other_segments or len(other_sentences) < len(other_segments):
            raise BenchmarkFormatError(f"{others_where}: needs at least one sentence and one per segment, found "
                                       f"{len(other_sentences)} sentences and {len(other_segments)} segments")
        references = []
        for segment in segments[: len(sentences)]:
            chosen, empty = overlapping_references(segment, other_segments)
            self.empty_references.update((video, index) for index in empty)
            references.append(tuple(other_sentences[index] for index in chosen))
        return ParagraphItem(video=video, sentences=tuple(sentences), timestamps=tuple(segments[: len(sentences)]),
                             references=tuple(references), duration=self._duration(video), is_foil=is_foil,
                             key=f"{video}#{'foil' if is_foil else 'correct'}")


def _idf_corpus(path: Path) -> Tuple[Tuple[str, ...], int]:
    """The training sentences of at most ``MAX_IDF_WORDS`` space-separated words, in file order, and how many
    were left out."""
    data = read_json(path)
    if not isinstance(data, dict) or not all(isinstance(entry, dict) for entry in data.values()):
        raise BenchmarkFormatError(f"{path}: expected an object of annotations keyed by video id")
    corpus: List[str] = []
    dropped = 0
    for video, entry in data.items():
        for sentence in as_text_list(entry.get("sentences"), f"{path} [{video!r}]['sentences']"):
            if len(sentence.split(" ")) > MAX_IDF_WORDS:
                dropped += 1
            else:
                corpus.append(sentence)
    return tuple(corpus), dropped


def _videos(correct: Dict[str, List[str]], foiled: Dict[str, List[str]], features: Path) -> Tuple[List[str], int]:
    """The videos of the correct paragraphs that have a feature file (file order), which must be those of the foil
    paragraphs that have one, and how many were left out."""
    available = feature_files(features)
    videos = [video for video in correct if video in available]
    foiled_videos = {video for video in foiled if video in available}
    if set(videos) != foiled_videos:
        only_correct = sorted(set(videos) - foiled_videos)[:3]
        only_foiled = sorted(foiled_videos - set(videos))[:3]
        raise BenchmarkFormatError(f"{CORRECT} and {FOILED} describe different videos (with feature files): only in "
                                   f"the first {only_correct}, only in the second {only_foiled}")
    if not videos:
        raise BenchmarkFormatError(f"{features}: no video of {CORRECT} has a feature file <video id>.pt")
    return videos, len(correct) - len(videos)


def load_activitynet_foil(root: Optional[PathLike], source: str) -> Benchmark:
    """ActivityNet-FOIL: two items per video, its correct paragraph and its foil, with their segments and
    references."""
    ACTIVITYNET_FOIL.check_source(source)
    folder = ACTIVITYNET_FOIL.folder(root)
    correct_path, foiled_path = ACTIVITYNET_FOIL.locate(folder, [CORRECT]), ACTIVITYNET_FOIL.locate(folder, [FOILED])
    correct, foiled = _paragraphs(correct_path), _paragraphs(foiled_path)
    annotations = _Annotations(folder)
    corpus, dropped = _idf_corpus(ACTIVITYNET_FOIL.locate(folder, [TRAIN]))
    features = folder / FEATURES
    videos, left_out = _videos(correct, foiled, features)
    items = [
        annotations.item(video, paragraphs[video], is_foil, str(path))
        for video in videos
        for paragraphs, is_foil, path in ((correct, False, correct_path), (foiled, True, foiled_path))
    ]
    empty_references = len(annotations.empty_references)
    if empty_references:
        warnings.warn(f"benchmark 'activitynet-foil': {empty_references} reference segment(s) end before they start "
                      "(the demo divides by zero there); the overlap rule never chose them", stacklevel=3)
    protocol = (
        f"ActivityNet-FOIL (Shi et al., 2022) read from {folder} as the EMScore authors' ActivityNet-FOIL_demo.py "
        f"reads it: {len(videos)} videos, each with its correct paragraph ({CORRECT}) and its foil ({FOILED}) "
        f"({left_out} videos of {CORRECT} have no feature file and are left out, as the demo leaves them out). "
        f"Sentence i of a paragraph is scored against segment i = [t0, t1] seconds of {SEGMENTS}: the rows "
        f"int(t0 * T // duration) to int(t1 * T // duration) of the video's features {FEATURES}/<video id>.pt (T "
        f"rows; Python slicing; duration from {OTHER_PARAGRAPHS}); and against the sentences of the "
        f"video's paragraph in {OTHER_PARAGRAPHS} whose segment, in whole seconds int(c)..int(d), shares more than "
        f"40% of its seconds with int(t0)..int(t1) (all of them when none does; {empty_references} empty "
        "reference segments). A paragraph's score is the mean of its sentences' scores; accuracy = the share "
        "of videos whose correct paragraph scores strictly higher than its foil (a tie is a failure). A sentence "
        "whose segment holds no frame gets no score (the demo's is NaN): its paragraph has none and its video counts "
        f"as a failure. IDF: the {len(corpus)} sentences of {TRAIN} of at most {MAX_IDF_WORDS} space-separated words "
        f"({dropped} longer ones left out), file order. Texts as released. The PAC-S paper (Table 6) reports EMScore "
        "and PAC-S, and EMScoreRef and RefPAC-S (EMScore(X,V,X*), with these references)."
    )
    setup = VideoSetup(str(features), None, corpus)
    return ACTIVITYNET_FOIL.build(items, protocol, f"json:{folder}", video=setup)

"""The video benchmark loaders on small releases written in the EMScore demos' layout (tests/fixtures/video_benchmarks):
what VATEX-EVAL-demo.py and ActivityNet-FOIL_demo.py read, the segment and reference rules, the restricted
unpickler, and clear errors."""
from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from capeval.benchmarks import ParagraphItem, RatedVideoItem, load_benchmark
from capeval.benchmarks.datasets.activitynet_foil import overlapping_references, segment_frames
from capeval.inputs import InputError
from fixtures.video_benchmarks import (command_pickle, object_array, write_activitynet_foil, write_pickle,
                                      write_vatex_eval)


@pytest.fixture
def vatex(tmp_path: Path):
    return write_vatex_eval(tmp_path / "vatex")


def _demo_reads(folder: Path, n_refs: int):
    """What VATEX-EVAL-demo.py makes of the files (trusted test data, read with plain pickle)."""
    def load(name):
        with open(folder / name, "rb") as handle:
            return pickle.load(handle)

    human = np.transpose(load("human_scores.pkl").reshape(3, -1), (1, 0))
    refs = np.array(load("gts_list.pkl").tolist())[:, :n_refs].tolist()
    return load("candidates_list.pkl").tolist(), refs, human, load("video_ids.pkl").tolist()


@pytest.mark.parametrize("n_refs", [0, 1, 9])
def test_vatex_eval_reads_the_files_as_the_demo(vatex, n_refs: int) -> None:
    benchmark = load_benchmark("vatex-eval", vatex.folder, references=n_refs)
    candidates, refs, human, videos = _demo_reads(vatex.folder, n_refs)
    items = benchmark.items
    assert all(isinstance(item, RatedVideoItem) for item in items) and len(items) == 12
    assert [item.candidate for item in items] == candidates == vatex.candidates
    assert [item.video for item in items] == videos == vatex.videos
    assert [list(item.references) for item in items] == refs
    assert all(len(item.references) == n_refs for item in items)
    assert [list(item.human) for item in items] == human.tolist()
    # rater r's score of candidate i is the i-th score of the r-th third of the flat file
    assert items[5].human == (vatex.human[0, 5], vatex.human[1, 5], vatex.human[2, 5])
    assert len({item.key for item in items}) == 12
    assert (benchmark.task, benchmark.statistics) == ("video_correlation", ("kendall_tau_b", "spearman"))
    assert benchmark.video.features_dir == str(vatex.folder / "VATEX-EVAL_video_feats")
    assert benchmark.video.num_frames == 10
    assert benchmark.video.idf_corpus == tuple(vatex.corpus)  # every training caption, in file order
    assert f"the first {n_refs} of its references" in benchmark.protocol


def test_vatex_eval_default_is_one_reference_and_references_may_be_rows_of_lists(vatex) -> None:
    # a 1-D object array holding one list per candidate reads as the demo reads the 2-D array
    write_pickle(vatex.folder / "gts_list.pkl", object_array(vatex.references))
    benchmark = load_benchmark("vatex-eval", vatex.folder)
    assert [item.references for item in benchmark.items] == [tuple(refs[:1]) for refs in vatex.references]


def _rewrite(folder: Path, name: str, value) -> None:
    write_pickle(folder / name, value)


@pytest.mark.parametrize(
    "change, options, error",
    [
        (lambda v: _rewrite(v.folder, "human_scores.pkl", v.human.reshape(-1)[:-1]), {},
         r"human_scores.pkl: holds 35 scores .*3 raters x 12 candidates = 36 expected"),
        (lambda v: _rewrite(v.folder, "human_scores.pkl", np.where(np.arange(36) == 14, np.nan, v.human.reshape(-1))),
         {}, r"human_scores.pkl: the scores of item 2 are not all finite"),
        (lambda v: os.remove(v.folder / "VATEX-EVAL_video_feats" / "Hx-9_000000_000010.pt"), {},
         r"1 video\(s\) of .*video_ids.pkl have no feature file <video id>.pt: item 3 \('Hx-9_000000_000010'\)"),
        (lambda v: _rewrite(v.folder, "video_ids.pkl", object_array(v.videos[:-1])), {},
         r"video_ids.pkl: holds 11 video ids for 12 candidates"),
        (lambda v: _rewrite(v.folder, "candidates_list.pkl", object_array(v.candidates[:4] + [7] + v.candidates[5:])),
         {}, r"candidates_list.pkl\[4\]: expected a string, found int"),
        (lambda v: None, {"references": 10}, r"gts_list.pkl row 0: holds 9 references, 10 asked"),
        (lambda v: _rewrite(v.folder, "gts_list.pkl", object_array([refs[:9 - (i == 6)] for i, refs in
                                                                     enumerate(v.references)])),
         {"references": 9}, r"gts_list.pkl row 6: holds 8 references, 9 asked"),
        (lambda v: (v.folder / "vatex_train_en_annotations.json").write_text('["a caption"]'), {},
         r"vatex_train_en_annotations.json: expected an object of caption lists keyed by video id"),
    ],
)
def test_vatex_eval_bad_release_is_an_input_error_naming_file_and_item(vatex, change, options, error) -> None:
    change(vatex)
    with pytest.raises(InputError, match=error):
        load_benchmark("vatex-eval", vatex.folder, **options)


def test_vatex_eval_missing_files_and_bad_options(vatex, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="but it must be a whole number of at least 0"):
        load_benchmark("vatex-eval", vatex.folder, references=-1)
    with pytest.raises(FileNotFoundError, match="needs root=.*candidates_list.pkl"):
        load_benchmark("vatex-eval")
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        load_benchmark("vatex-eval", vatex.folder / "gts_list.pkl")
    os.remove(vatex.folder / "gts_list.pkl")
    with pytest.raises(FileNotFoundError, match="gts_list.pkl not found in"):
        load_benchmark("vatex-eval", vatex.folder)


def test_a_release_pickle_that_runs_a_command_is_refused_without_running(vatex, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    (vatex.folder / "candidates_list.pkl").write_bytes(command_pickle(f"touch {marker}"))
    refused = r"candidates_list.pkl: refused to load the pickled global (posix|os|nt)\.system"
    with pytest.raises(InputError, match=refused):
        load_benchmark("vatex-eval", vatex.folder)
    assert not marker.exists()


# ----------------------------------------------------------------------------------------------------------------
# ActivityNet-FOIL: the demo's segment slicing and overlap rule


@pytest.mark.parametrize(
    "timestamp, frames, duration",
    [
        ((0.0, 5.5), 100, 20.0),
        ((1.96, 30.0), 2501, 100.04),  # 1.96 * 2501 // 100.04 is 48.0, int(1.96 * 2501 / 100.04) is 49
        ((12, 31), 90, 30),  # ints, and an end past the video: clipped
        ((7.5, 7.6), 50, 100.0),  # shorter than a frame: no frame
        ((9.0, 4.0), 50, 10.0),  # ends before it starts
        ((-1.0, 3.0), 40, 10.0),  # a negative start counts from the end, as Python slicing does
    ],
)
def test_segment_frames_are_the_demos_slice(timestamp, frames: int, duration) -> None:
    rows = np.arange(frames)
    demo = rows[int(timestamp[0] * frames // duration):int(timestamp[1] * frames // duration)]
    assert list(segment_frames(timestamp, frames, duration)) == demo.tolist()


def test_segment_frames_floor_division_differs_from_truncated_division() -> None:
    assert segment_frames((1.96, 30.0), 2501, 100.04)[0] == 48 != int(1.96 * 2501 / 100.04)
    assert not segment_frames((7.5, 7.6), 50, 100.0)


def _demo_overlap(timestamp, reference_timestamps):
    """use_ref_timestamps of ActivityNet-FOIL_demo.py, restated with its sets."""
    a, b = int(timestamp[0]), int(timestamp[1])
    chosen = [index for index, (c, d) in enumerate(reference_timestamps)
              if len(set(range(a, b + 1)) & set(range(int(c), int(d) + 1))) / len(range(int(c), int(d) + 1)) > 0.4]
    return chosen or list(range(len(reference_timestamps)))


@pytest.mark.parametrize(
    "timestamp, references",
    [
        ((2.7, 10.2), [(0, 5), (4.9, 20), (9.9, 10.1), (30, 40)]),
        ((0, 1.9), [(0, 4), (3, 9)]),  # shares 2 of the 5 seconds 0..4: exactly 40% is not more than 40%
        ((0, 2), [(0, 4), (3, 9)]),  # 3 of 5
        ((50, 60), [(0, 10), (11, 20)]),  # none shares enough: all
        ((5.5, 5.9), [(5.2, 5.8), (6, 7)]),  # whole seconds: 5..5 against 5..5
    ],
)
def test_overlapping_references_are_the_demos(timestamp, references) -> None:
    chosen, empty = overlapping_references(timestamp, references)
    assert chosen == _demo_overlap(timestamp, references) and empty == []


def test_an_empty_reference_segment_is_never_chosen_by_the_rule_and_counted() -> None:
    assert overlapping_references((0, 10), [(8, 3), (0, 9)]) == ([1], [0])
    assert overlapping_references((50, 60), [(8, 3), (0, 9)]) == ([0, 1], [0])  # none chosen: all, as the demo


def _anet(folder: Path, **changes):
    options = dict(
        segments={"v_aaa": [(0.0, 4.5), (4.0, 11.0), (10.5, 20.0)], "v_bbb": [(1.0, 9.0), (8.0, 30.0)],
                  "v_ccc": [(0.0, 3.0)]},
        durations={"v_aaa": 20.0, "v_bbb": 30.0, "v_ccc": 5.0},
        frames={"v_aaa": 40, "v_bbb": 17, "v_ccc": 5},
        without_features=("v_ccc",),
    )
    options.update(changes)
    return write_activitynet_foil(folder, **options)


def test_activitynet_foil_reads_the_release_as_the_demo(tmp_path: Path) -> None:
    release = _anet(tmp_path / "anet")
    benchmark = load_benchmark("activitynet-foil", release.folder)
    assert (benchmark.task, benchmark.statistics, benchmark.ties) == ("video_foil", ("accuracy",), "wrong")
    items = benchmark.items
    assert all(isinstance(item, ParagraphItem) for item in items)
    assert [(item.video, item.is_foil) for item in items] == [("v_aaa", False), ("v_aaa", True), ("v_bbb", False),
                                                              ("v_bbb", True)]  # v_ccc has no feature file
    assert "1 videos of final_right_video_sentences.json have no feature file" in benchmark.protocol
    for item in items:
        paragraphs = release.foiled if item.is_foil else release.correct
        assert list(item.sentences) == paragraphs[item.video]
        first, second = release.segments[item.video], release.others[item.video]
        assert [list(pair) for pair in item.timestamps] == first["timestamps"]
        assert item.duration == second["duration"]
        assert [list(refs) for refs in item.references] == [
            [second["sentences"][index] for index in _demo_overlap(timestamp, second["timestamps"])]
            for timestamp in first["timestamps"]
        ]
    assert items[0].references[0] == (release.others["v_aaa"]["sentences"][0],)
    assert benchmark.video.num_frames is None and benchmark.video.idf_corpus == tuple(release.corpus)
    assert len(release.corpus) == 3  # two of the five training sentences have over 66 words by split(" ")


def test_activitynet_foil_duration_is_the_second_annotations(tmp_path: Path) -> None:
    release = _anet(tmp_path / "anet")
    first, second = release.segments, release.others
    first["v_aaa"]["duration"], second["v_aaa"]["duration"] = 19.0, 21.0
    (release.folder / "anet_entities_test_1.json").write_text(json.dumps(first))
    (release.folder / "anet_entities_test_2.json").write_text(json.dumps(second))
    durations = {item.video: item.duration for item in load_benchmark("activitynet-foil", release.folder).items}
    assert durations == {"v_aaa": 21.0, "v_bbb": 30.0}
    (release.folder / "anet_entities_test_2.json").write_text(json.dumps({"v_aaa": second["v_aaa"]}))
    with pytest.raises(InputError, match=r"anet_entities_test_2.json: has no annotation of video 'v_bbb'"):
        load_benchmark("activitynet-foil", release.folder)


def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    "file_name, edit, error",
    [
        ("final_foil_video_sentences.json", lambda data: data["results"].pop("v_bbb"),
         r"describe different videos .*only in the first \['v_bbb'\]"),
        ("anet_entities_test_1.json", lambda data: data["v_bbb"]["timestamps"].pop(),
         r"final_right_video_sentences.json \['v_bbb'\]: 2 sentences but .*test_1.json \['v_bbb'\] has 1"),
        ("anet_entities_test_2.json", lambda data: data["v_aaa"].update(duration=0),
         r"anet_entities_test_2.json \['v_aaa'\]: duration must be positive"),
        ("anet_entities_test_1.json", lambda data: data["v_aaa"]["timestamps"].__setitem__(1, [4.0, "11"]),
         r"anet_entities_test_1.json \['v_aaa'\]\['timestamps'\]\[1\]: expected a number, found '11'"),
        ("final_right_video_sentences.json", lambda data: data.pop("results"), r"expected an object whose 'results'"),
        ("anet_entities_test_2.json", lambda data: data["v_aaa"].update(sentences=["only one"]),
         r"anet_entities_test_2.json \['v_aaa'\]: needs at least one sentence and one per segment"),
    ],
)
def test_activitynet_foil_bad_release_is_an_input_error(tmp_path: Path, file_name: str, edit, error: str) -> None:
    release = _anet(tmp_path / "anet")
    _edit_json(release.folder / file_name, edit)
    with pytest.raises(InputError, match=error):
        load_benchmark("activitynet-foil", release.folder)


def test_activitynet_foil_warns_of_empty_reference_segments(tmp_path: Path) -> None:
    release = _anet(tmp_path / "anet")
    _edit_json(release.folder / "anet_entities_test_2.json",
               lambda data: data["v_bbb"]["timestamps"].__setitem__(2, [25.0, 21.0]))
    with pytest.warns(UserWarning, match=r"1 reference segment\(s\) end before they start"):
        benchmark = load_benchmark("activitynet-foil", release.folder)
    assert "1 empty reference segments" in benchmark.protocol

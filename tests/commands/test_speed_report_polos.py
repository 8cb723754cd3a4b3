"""``speed/report.py``'s Polos rows: ``polos_speed.py`` at the family's size and at half of it, the polos wheel's figure
(the runner's JSON under the ``polos`` key of ``--originals``) with its ratio only on the run's very workload (the same
``workload_id``), and the per-item agreement of its scores with capeval's. ``polos_speed.py`` is replaced by its JSON:
no model runs here."""
from __future__ import annotations

import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any, Dict, List, Optional, Tuple

import pytest

from fixtures.paths import REPO_ROOT

WORKLOAD = "0123456789abcdef"
SCORES = [0.40, 0.45, 0.50, 0.55, 0.60, 0.65]


@pytest.fixture()
def speed(monkeypatch: pytest.MonkeyPatch) -> Tuple[ModuleType, ...]:
    """``report`` and the report's ``families``, ``originals`` and ``output`` modules, imported as ``report.py``
    imports them."""
    monkeypatch.syspath_prepend(str(REPO_ROOT / "speed"))
    import report
    from _report import families, originals, output

    return report, families, originals, output


def wheel_figure(workload_id: str = WORKLOAD, **changes: Any) -> Dict[str, Any]:
    """The runner's JSON for 2 images, 6 items: 60 s at batch size 64, scores off by 2e-4 from capeval's; at batch
    size 1, 5 of 6 within 1e-6."""
    return {"tool": "polos 0.1.3 wheel, PolosEstimator.predict", "date": "2026-11-27", "machine": "m",
            "torch": "2.14.1", "threads": 2, "workload_id": workload_id, "images": 2, "items": 6, "batch_size": 64,
            "seconds": 60.0, "cpu_seconds": 120.0, "peak_rss_mb": 4400.0, "load_average_at_start": 1.0,
            "started": "2026-11-27 20:00:00", "scores": [score + 2e-4 for score in SCORES],
            "seconds_batch_1": 200.0, "scores_batch_1": [*SCORES[:5], SCORES[5] + 3e-6], **changes}


def run_report(speed: Tuple[ModuleType, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
               figure: Optional[Dict[str, Any]], quick: bool = True, sizes: Optional[Dict[str, int]] = None,
               peaks: Tuple[float, float] = (1950.0, 2000.0), cache_mb: Optional[Tuple[float, float]] = None
               ) -> Tuple[Any, List[List[str]]]:
    """The Polos family's result, with polos_speed.py's runs replaced by fixed JSON (10 s wall, 15 + 1 CPU s; peak
    memory ``peaks`` and memory cache rows ``cache_mb`` at the smaller and the larger size), and the arguments of
    each run."""
    _, families, originals, _ = speed
    calls: List[List[str]] = []

    def polos_speed(script: str, arguments: List[str], json_out: Path) -> Dict[str, Any]:
        assert script == "polos_speed.py"
        calls.append(arguments)
        images = int(arguments[arguments.index("--images") + 1])
        larger = not calls[1:]
        caches = {} if cache_mb is None else {"memory_cache_mb": cache_mb[larger]}
        return {"capeval": {"tool": "capeval", "images": images, "items": 3 * images, "seconds": 10.0,
                            "cpu_seconds": 15.0, "worker_cpu_seconds": 1.0, "peak_rss_mb": peaks[larger],
                            "workload_id": WORKLOAD if larger else "x", "scores": SCORES if larger else SCORES[:3],
                            **caches}, "original": None}

    monkeypatch.setattr(families, "run_script", polos_speed)
    figures = None
    if figure is not None:
        (tmp_path / "originals.json").write_text(json.dumps({"polos": figure}), encoding="utf-8")
        figures = originals.load_originals(tmp_path / "originals.json")
    settings = families.Settings("cpu", 2, quick, tmp_path / "work", tmp_path / "flickr8k", tmp_path / "clip.mp4",
                                 None, tmp_path, figures, sizes or {})
    [result] = families.polos(settings)
    return result, calls


def test_images_sets_the_polos_size(speed: Tuple[ModuleType, ...]) -> None:
    report = speed[0]
    assert report.parse_arguments(["--families", "tigerscore,polos", "--images", "polos=20"]).images == {"polos": 20}


@pytest.mark.parametrize(("quick", "sizes", "expected"), [
    (True, {}, (10, 5)),
    (False, {}, (1000, 500)),
    (True, {"polos": 21}, (21, 10)),
])
def test_the_sizes_reach_polos_speed(speed: Tuple[ModuleType, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     quick: bool, sizes: Dict[str, int], expected: Tuple[int, int]) -> None:
    _, calls = run_report(speed, tmp_path, monkeypatch, None, quick, sizes)
    assert [int(call[call.index("--images") + 1]) for call in calls] == list(expected)
    for call in calls:
        assert call[call.index("--work-dir") + 1] == str(tmp_path / "work")
        assert call[call.index("--data-dir") + 1] == str(tmp_path / "flickr8k")
        assert call[call.index("--threads") + 1] == "2"


def test_a_figure_of_the_runs_workload_gets_its_ratios_and_score_agreement(
        speed: Tuple[ModuleType, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    output = speed[3]
    result, _ = run_report(speed, tmp_path, monkeypatch, wheel_figure(), sizes={"polos": 2})
    assert (result.capeval.items, result.capeval.cpu_seconds) == (6, 16.0)
    [wheel] = result.peers
    assert (wheel.tool, wheel.workload, wheel.comparable) == (
        "original (polos 0.1.3 wheel, PolosEstimator.predict)", "Expert, 2 images", True)
    [speed_line] = output.speed_verdicts([result])
    assert speed_line == ("PASS  Polos >= 3x original (polos 0.1.3 wheel, PolosEstimator.predict): 6.00x by wall time "
                          "(per CPU second 7.50x); read from originals.json (dated 2026-11-27, machine: m)")
    assert output.memory_verdicts([result]) == [
        "PASS  Polos memory flat in items: 1,950 MB (3 items) -> 2,000 MB (6 items), +2.6% (target <= 10%)"]
    assert result.notes[0].startswith("Polos: Per-item scores against the wheel at batch size 1 (200.0 s): 5 of 6 "
                                      "items within 1e-06 (largest difference 3.0e-06)")
    assert result.notes[1].startswith("Polos: Per-item scores against the wheel at batch size 64 (they differ by "
                                      "design")
    assert result.notes[1].endswith("0 of 6 items within 1e-06 (largest difference 2.0e-04).")
    table = output.markdown_table([result], 1e11)
    assert "| 6 | 60.0 | 120.0 | 0.10 | 4,400 | 6.00 |" in table[-1]


def test_a_figure_of_another_workload_gets_no_ratio(speed: Tuple[ModuleType, ...], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """As many images and items, but other items (another data folder or Expert release): not the run's workload."""
    output = speed[3]
    result, _ = run_report(speed, tmp_path, monkeypatch, wheel_figure("fedcba9876543210"), sizes={"polos": 2})
    assert result.peers[0].comparable is False
    assert result.notes == []
    assert output.speed_verdicts([result]) == [
        "SKIP  Polos >= 3x original (polos 0.1.3 wheel, PolosEstimator.predict): the figure's workload (Expert, 2 "
        "images, 6 items) is not this run's (Expert, 2 images, 6 items)"]


def test_without_a_figure_the_ratio_is_skipped(speed: Tuple[ModuleType, ...], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    result, _ = run_report(speed, tmp_path, monkeypatch, None)
    assert result.peers == [] and result.notes == []
    assert speed[3].speed_verdicts([result]) == [
        "SKIP  Polos >= 3x its original: no figure of the original given (--originals)"]


def test_the_memory_check_is_net_of_the_engines_memory_caches(speed: Tuple[ModuleType, ...], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The larger run's peak grew by 11%, 200 of its 220 MB rows of the engine's bounded memory caches."""
    result, _ = run_report(speed, tmp_path, monkeypatch, None, peaks=(2000.0, 2220.0), cache_mb=(50.0, 250.0))
    assert speed[3].memory_verdicts([result]) == [
        "PASS  Polos memory flat in items, net of the engine's memory caches (bounded per row kind): 1,950 -> 1,970 MB, "
        "+1.0%; peaks 2,000 MB (15 items) -> 2,220 MB (30 items), of which cached rows 50 -> 250 MB (target <= 10%)"]


@pytest.mark.parametrize(("changes", "message"), [
    ({"workload_id": None}, "polos.workload_id is missing or not a <class 'str'>"),
    ({"scores": "0.5"}, "polos.scores is missing or not a <class 'list'>"),
    ({"peak_rss_mb": None}, "polos.peak_rss_mb is missing"),
    ({"scores": SCORES[:5]}, "polos.scores holds 5 scores for 6 items"),
])
def test_the_figure_file_refuses_a_wheel_figure_without_what_the_report_reads(
        speed: Tuple[ModuleType, ...], tmp_path: Path, changes: Dict[str, Any], message: str) -> None:
    originals = speed[2]
    path = tmp_path / "originals.json"
    path.write_text(json.dumps({"polos": wheel_figure(**changes)}), encoding="utf-8")
    with pytest.raises(SystemExit, match=re.escape(message)):
        originals.load_originals(path)

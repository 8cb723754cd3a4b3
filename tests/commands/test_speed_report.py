"""``speed/report.py``'s command line: ``--images FAMILY=N`` sets a family's benchmark size (and N // 2 for the
memory check), refuses what it cannot size, and reaches the family's speed script; the memory check's verdicts."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Dict, Iterator, List, Tuple

import pytest

from fixtures.paths import REPO_ROOT


@pytest.fixture()
def speed() -> Iterator[Tuple[ModuleType, ModuleType]]:
    """``report`` and ``_report.families`` imported from ``speed/`` (the scripts' own import path)."""
    sys.path.insert(0, str(REPO_ROOT / "speed"))
    try:
        yield importlib.import_module("report"), importlib.import_module("_report.families")
    finally:
        sys.path.remove(str(REPO_ROOT / "speed"))


def test_images_sets_each_named_family(speed: Tuple[ModuleType, ModuleType]) -> None:
    report, _ = speed
    arguments = report.parse_arguments(["--families", "tigerscore,vilbertscore", "--images", "tigerscore=300",
                                        "--images", "vilbertscore=10"])
    assert arguments.images == {"tigerscore": 300, "vilbertscore": 10}
    assert report.parse_arguments(["--quick"]).images == {}


@pytest.mark.parametrize(("value", "message"), [
    ("emscore=3", "FAMILY=N with FAMILY one of clip-s, tigerscore, vilbertscore, bridge, polos"),
    ("tigerscore", "FAMILY=N with FAMILY one of"),
    ("bridge=4", "bridge is not in --families"),
    ("tigerscore=1", "N must be a whole number >= 2"),
    ("tigerscore=ten", "N must be a whole number >= 2"),
    ("tigerscore=-5", "N must be a whole number >= 2"),
])
def test_images_refuses_what_it_cannot_size(speed: Tuple[ModuleType, ModuleType], value: str, message: str,
                                            capsys: pytest.CaptureFixture) -> None:
    report, _ = speed
    with pytest.raises(SystemExit):
        report.parse_arguments(["--families", "tigerscore,emscore", "--images", value])
    assert f"--images {value!r}: {message}" in capsys.readouterr().err


def test_images_refuses_a_family_given_twice(speed: Tuple[ModuleType, ModuleType],
                                             capsys: pytest.CaptureFixture) -> None:
    report, _ = speed
    with pytest.raises(SystemExit):
        report.parse_arguments(["--images", "tigerscore=300", "--images", "tigerscore=500"])
    assert "--images 'tigerscore=500': tigerscore is given twice" in capsys.readouterr().err


def _settings(families: ModuleType, tmp_path: Path, quick: bool, sizes: Dict[str, int]) -> Any:
    return families.Settings("cpu", 2, quick, tmp_path / "work", tmp_path / "flickr8k", tmp_path / "clip.mp4", None,
                             tmp_path, None, sizes)


@pytest.mark.parametrize(("quick", "sizes", "expected"), [
    (False, {"tigerscore": 300}, (300, 150)),
    (True, {"tigerscore": 7}, (7, 3)),
    (True, {"vilbertscore": 10}, (100, 50)),  # another family's size leaves TIGEr's quick sizes
    (False, {}, (1000, 500)),
])
def test_the_sizes_reach_the_family_script(speed: Tuple[ModuleType, ModuleType], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch, quick: bool, sizes: Dict[str, int],
                                          expected: Tuple[int, int]) -> None:
    _, families = speed
    calls: List[List[str]] = []
    rate = {"flops_per_second": 1e9, "matmul_flops_per_second": 2e9}

    def run_script(script: str, arguments: List[str], json_out: Path) -> Dict[str, Any]:
        assert script == "tiger_speed.py"
        calls.append(arguments)
        images = int(arguments[arguments.index("--images") + 1])
        return {"images": images, "items": 6 * images, "seconds": 1.0, "cpu_seconds": 2.0, "peak_rss_mb": 100.0,
                "forward": {"gru": rate, "region_projection": rate, "grounding_float64": rate}}

    monkeypatch.setattr(families, "run_script", run_script)
    [result] = families.tigerscore(_settings(families, tmp_path, quick, sizes))
    assert [int(call[call.index("--images") + 1]) for call in calls] == list(expected)
    assert "--forward" in calls[0] and "--forward" not in calls[1]
    assert (result.capeval.workload, result.capeval.items) == (f"Expert, {expected[0]:,} images", 6 * expected[0])


@pytest.mark.parametrize(("cache_mb", "verdict", "detail"), [
    # the larger run's peak grew by 30%, all of it rows of the bounded memory caches: flat net of them
    ((100.0, 400.0), "PASS", "900 -> 900 MB, +0.0%; peaks 1,000 MB (3,000 items) -> 1,300 MB (6,000 items), of which "
                             "cached rows 100 -> 400 MB"),
    # the same peaks with the caches unchanged: the growth is the scorer's own
    ((100.0, 100.0), "FAIL", "900 -> 1,200 MB, +33.3%"),
])
def test_the_memory_check_is_net_of_the_engines_memory_caches(speed: Tuple[ModuleType, ModuleType], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              cache_mb: Tuple[float, float], verdict: str,
                                                              detail: str) -> None:
    _, families = speed
    rate = {"flops_per_second": 1e9, "matmul_flops_per_second": 2e9}

    def run_script(script: str, arguments: List[str], json_out: Path) -> Dict[str, Any]:
        larger = "--forward" in arguments
        images = int(arguments[arguments.index("--images") + 1])
        return {"images": images, "items": 6 * images, "seconds": 1.0, "cpu_seconds": 2.0,
                "peak_rss_mb": 1300.0 if larger else 1000.0, "memory_cache_mb": cache_mb[larger],
                "forward": {"gru": rate, "region_projection": rate, "grounding_float64": rate}}

    monkeypatch.setattr(families, "run_script", run_script)
    [result] = families.tigerscore(_settings(families, tmp_path, False, {}))
    from _report.output import memory_verdicts

    [line] = memory_verdicts([result])
    assert line.startswith(f"{verdict}  TIGEr memory flat in items, net of the engine's memory caches")
    assert detail in line


def test_the_memory_check_without_cache_figures_compares_peaks(speed: Tuple[ModuleType, ModuleType]) -> None:
    _, families = speed
    from _report.output import memory_verdicts

    check = families.MemoryCheck("120-frame video", 1000.0, "480-frame video", 1150.0)
    result = families.FamilyResult("EMScore / video PAC-S", families.Row("capeval EMScore", "files", 6, 1.0, 1000.0),
                                   memory=check, memory_in="video length")
    assert memory_verdicts([result]) == [
        "FAIL  EMScore / video PAC-S memory flat in video length: 1,000 MB (120-frame video) -> 1,150 MB "
        "(480-frame video), +15.0% (target <= 10%)"]

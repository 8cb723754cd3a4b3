"""``speed/report.py``'s EMScore rows: the original EMScorer's figure (the runner's JSON under the ``emscore`` key of
``--originals``) gets a ratio only where it was made on the run's workload, the same manifest items and videos, and
the per-item agreement of its scores with capeval's is printed. ``video_speed.py`` is replaced by its JSON: no model
runs here."""
from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any, Dict, List, Tuple

import pytest

from fixtures.paths import REPO_ROOT

VIEW, KEY, NAME = "EMScore(X,V)", "cogr", "emscore_video_cogrs"
"""One score of the original's result dict and capeval's name for it."""


def capeval_peer(items: int, videos: int, seconds: float, cogr: List[float]) -> Dict[str, Any]:
    return {"items": items, "videos": videos, "frames": 10 * videos, "seconds": seconds, "cpu_seconds": seconds,
            "worker_cpu_seconds": 0.0, "peak_rss_mb": 1000.0, "peak_tree_pss_mb": 0.0, "scores": {NAME: cogr}}


def original_peer(items: int, videos: int, seconds: float, cogr: List[float]) -> Dict[str, Any]:
    return {"items": items, "videos": videos, "seconds": seconds, "cpu_seconds": 2 * seconds,
            "children_cpu_seconds": 0.5, "peak_rss_mb": 2000.0, "encode_image_s": 1.0, "encode_text_s": 1.0,
            "scores": {VIEW: {KEY: cogr}}}


@pytest.fixture()
def speed(monkeypatch: pytest.MonkeyPatch) -> Tuple[ModuleType, ModuleType, ModuleType]:
    """The report's ``families``, ``originals`` and ``output`` modules, imported as ``report.py`` imports them, with
    the random model's folder and its MACs replaced (the rows do not depend on them)."""
    monkeypatch.syspath_prepend(str(REPO_ROOT / "speed"))
    import _flops
    import _models
    from _report import families, originals, output

    monkeypatch.setattr(_models, "random_vit_b32_folder", lambda work_dir: work_dir)
    monkeypatch.setattr(_flops, "vit_image_macs", lambda folder: 4.41e9)
    return families, originals, output


def run_report(speed: Tuple[ModuleType, ModuleType, ModuleType], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
               figure_peers: Dict[str, Dict[str, Any]]) -> Tuple[List[Any], List[str]]:
    """The EMScore family's results and speed lines, with video_speed.py's run replaced by a fixed JSON."""
    families, originals, output = speed
    files_cogr = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    run = {"files": capeval_peer(6, 1, 60.0, files_cogr),
           "features-pt": capeval_peer(120, 20, 10.0, [0.01 * index for index in range(120)]),
           "long-1min": capeval_peer(6, 1, 30.0, files_cogr), "long-2min": capeval_peer(6, 1, 50.0, files_cogr),
           "forward": {"frames": 64, "seconds": 4.0, "matmul_flops": 1e11}}
    calls: List[List[str]] = []

    def video_speed(script: str, arguments: List[str], json_out: Path) -> Dict[str, Any]:
        calls.append(arguments)
        return {"capeval": run}

    monkeypatch.setattr(families, "run_script", video_speed)
    figure_file = tmp_path / "originals.json"
    figure = {"tool": "EMScorer", "commit": "20bce0a", "date": "2026-11-27", "machine": "m", "peers": figure_peers}
    figure_file.write_text(json.dumps({"emscore": figure}), encoding="utf-8")
    settings = families.Settings("cpu", 2, True, tmp_path, tmp_path, tmp_path / "clip.mp4", None, tmp_path,
                                 originals.load_originals(figure_file))
    results = families.emscore(settings)
    passed = calls[0][calls[0].index("--original-json") + 1]
    assert json.loads(Path(passed).read_text(encoding="utf-8")) == figure
    return results, output.speed_verdicts(results)


def test_a_figure_of_the_runs_workload_gets_its_ratio_and_score_agreement(
        speed: Tuple[ModuleType, ModuleType, ModuleType], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files_cogr = [0.1, 0.2, 0.3 + 1e-3, 0.4, 0.5, 0.6 + 2e-7]
    results, lines = run_report(speed, tmp_path, monkeypatch, {
        "files": original_peer(6, 1, 150.0, files_cogr),
        "features-pt": original_peer(120, 20, 40.0, [0.01 * index for index in range(120)])})
    assert [family.peers[0].comparable for family in results] == [True, True]
    assert lines[0].startswith("FAIL  EMScore / video PAC-S >= 3x original EMScorer: 2.50x by wall time "
                               "(per CPU second 5.01x); read from originals.json (dated 2026-11-27, machine: m)")
    assert lines[1].startswith("PASS  EMScore, cached features >= 3x original EMScorer: 4.00x by wall time")
    assert ("EMScore files, per-item scores against the original's: cogr 5 of 6 items within 1e-05 (largest "
            "difference 1.0e-03)") in results[0].notes[0]
    assert "cogr 120 of 120 items within 1e-05 (largest difference 0.0e+00)" in results[1].notes[0]


def test_a_figure_of_other_feature_files_gets_no_ratio(
        speed: Tuple[ModuleType, ModuleType, ModuleType], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As many items, on 30 feature files where the run scored 20: not the run's workload."""
    results, lines = run_report(speed, tmp_path, monkeypatch, {
        "features-pt": original_peer(120, 30, 40.0, [0.0] * 120)})
    assert results[0].peers == []
    assert results[1].peers[0].comparable is False
    assert results[1].notes == []
    assert lines[0].startswith("SKIP  EMScore / video PAC-S >= 3x its original: no figure of the original given")
    assert lines[1] == ("SKIP  EMScore, cached features >= 3x original EMScorer: the figure's workload (VATEX-EVAL "
                        "shape, features-pt, videos: 30, 120 items) is not this run's (VATEX-EVAL shape, features-pt, "
                        "videos: 20, 120 items)")
    table = speed[2].markdown_table(results, 1e11)
    assert "| 120 | 40.0 | 80.5 | 3.00 | 2,000 | n/a (other workload) |" in table[-1]

"""``speed/startup.py``'s start-up report (issue 38): the PASS/FAIL/SKIP lines and the tables on given figures, the
fresh-process measurement on trivial commands, and the plumbing of a family's measures and its original's commands
with stand-ins for the processes. No timing is asserted."""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Dict, Iterator, List, Sequence, Tuple

import pytest

from fixtures.paths import REPO_ROOT


@pytest.fixture()
def speed(monkeypatch: pytest.MonkeyPatch) -> Iterator[Tuple[ModuleType, ModuleType]]:
    """``startup`` and ``_report.startup`` imported from ``speed/`` (the scripts' own import path)."""
    monkeypatch.syspath_prepend(str(REPO_ROOT / "speed"))
    yield importlib.import_module("startup"), importlib.import_module("_report.startup")


def test_the_verdicts_on_given_figures(speed: Tuple[ModuleType, ModuleType]) -> None:
    _, startup = speed
    rows = [startup.FamilyStartup("tigerscore", 3.4, None, 0.9, 0.5, 4.8, original_first_score_seconds=4.0),
            startup.FamilyStartup("clipscore", 3.6, 3.2, 0.5, 0.8, 5.0),  # its own floor, measured beside it
            startup.FamilyStartup("polos", None)]
    wholes = [startup.WholeProcess("tigerscore", "examples", 5.0, 45.0),
              startup.WholeProcess("tigerscore", "Expert shape", 46.0, 230.0),
              startup.WholeProcess("clipscore", "examples", 5.5)]
    assert startup.startup_verdicts(3.0, rows, wholes) == [
        "PASS  tigerscore import <= import torch + 0.5 s: 3.40 s, import torch 3.00 s (+0.40 s)",
        "PASS  clipscore import <= import torch + 0.5 s: 3.60 s, import torch 3.20 s (+0.40 s)",
        "SKIP  polos import <= import torch + 0.5 s: not measured",
        "PASS  tigerscore construction <= weights read + 0.5 s: 0.90 s, weights read 0.50 s (+0.40 s)",
        "PASS  clipscore construction <= weights read + 0.5 s: 0.50 s, weights read 0.80 s (-0.30 s)",
        "SKIP  polos construction <= weights read + 0.5 s: not measured (no model folder)",
        "PASS  tigerscore whole process >= 8x faster than its original's (examples): 9.00x (5.00 s against 45.00 s)",
        "FAIL  tigerscore whole process >= 8x faster than its original's (Expert shape): 5.00x (46.00 s against "
        "230.00 s)",
        "FAIL  tigerscore first score no slower than its original's: 4.80 s against 4.00 s",
        "SKIP  clipscore first score no slower than its original's: no first-score figure of both (capeval's and the "
        "original's)",
        "SKIP  polos first score no slower than its original's: no first-score figure of both (capeval's and the "
        "original's)"]


def test_the_tiger_ratio_is_skipped_without_the_originals_figure(speed: Tuple[ModuleType, ModuleType]) -> None:
    _, startup = speed
    wholes = [startup.WholeProcess("tigerscore", "examples", 5.0)]
    lines = startup.startup_verdicts(3.0, [], wholes)
    assert lines == ["SKIP  tigerscore whole process >= 8x faster than its original's (examples): no figure of both"]
    assert startup.startup_verdicts(3.0, [], []) == [
        "SKIP  tigerscore whole process >= 8x faster than its original's: tigerscore not run"]


def test_the_tables_show_what_is_missing(speed: Tuple[ModuleType, ModuleType]) -> None:
    _, startup = speed
    rows = [startup.FamilyStartup("tigerscore", 3.4, 3.5, 0.9, 0.5, 4.8, 4.0), startup.FamilyStartup("polos")]
    wholes = [startup.WholeProcess("tigerscore", "examples", 5.0, 45.0), startup.WholeProcess("polos", "examples",
                                                                                             None)]
    table = startup.startup_table(3.0, rows, wholes)
    assert table[0].startswith("`import torch` floor: 3.00 s at best over the run;")
    assert "| tigerscore | 3.50 | 3.40 | -0.10 | 0.90 | 0.50 | 4.80 | 4.00 |" in table
    assert "| polos | 3.00 | failed |  |  |  |  | not given |" in table
    assert "| tigerscore | examples | 5.00 | 45.00 | 9.00x |" in table
    assert "| polos | examples | failed | not given |  |" in table


def test_best_of_keeps_the_smallest_of_each_printed_figure(speed: Tuple[ModuleType, ModuleType],
                                                          tmp_path: Path) -> None:
    _, startup = speed
    counter = tmp_path / "runs"
    counter.write_text("", encoding="utf-8")
    script = ("import json, pathlib; runs = pathlib.Path(%r); runs.write_text(runs.read_text() + 'x'); "
              "n = len(runs.read_text()); print('log line'); print(json.dumps({'a': 10 - n, 'b': n, 'name': 'x'}))"
              % str(counter))
    best = startup.best_of([sys.executable, "-c", script], repeats=3)
    assert counter.read_text(encoding="utf-8") == "xxx"  # three fresh processes
    assert best.figures == {"a": 7, "b": 1}
    assert best.error is None and best.wall_seconds is not None


def test_best_of_stops_at_a_failure_with_the_figures_printed_before_it(speed: Tuple[ModuleType, ModuleType]) -> None:
    _, startup = speed
    script = "import json, sys; print(json.dumps({'a': 1.5, 'error': 'OSError: no folder'})); sys.exit(1)"
    best = startup.best_of([sys.executable, "-c", script], repeats=3)
    assert (best.figures, best.error, best.wall_seconds) == ({"a": 1.5}, "OSError: no folder", None)
    best = startup.best_of([sys.executable, "-c", "import sys; sys.exit('the last line of errors')"], repeats=2)
    assert (best.figures, best.error) == ({}, "the last line of errors")


def test_the_probe_times_an_import_in_a_fresh_process(speed: Tuple[ModuleType, ModuleType]) -> None:
    _, startup = speed
    best = startup.probe({"import": "json"}, repeats=2)
    assert best.error is None and set(best.figures) == {"import_seconds"}
    best = startup.probe({"import": "capeval_has_no_such_module"}, repeats=2)
    assert best.figures == {} and best.error == "ModuleNotFoundError: No module named 'capeval_has_no_such_module'"


@pytest.mark.parametrize(("arguments", "message"), [
    (["--original", "emscore=run.sh"], "WORKLOAD=COMMAND with WORKLOAD one of clipscore, tigerscore, "
                                       "tigerscore-expert"),
    (["--original", "clipscore="], "WORKLOAD=COMMAND"),
    (["--original", "clipscore=a", "--original", "clipscore=b"], "clipscore is given twice"),
    (["--expert-images", "200"], "--expert-images: needs tigerscore in --families and --nltk-data"),
    (["--repeats", "0"], "--repeats must be at least 1"),
])
def test_the_command_line_refuses_what_it_cannot_run(speed: Tuple[ModuleType, ModuleType], arguments: List[str],
                                                     message: str, capsys: pytest.CaptureFixture) -> None:
    script, _ = speed
    with pytest.raises(SystemExit):
        script.parse_arguments(["--families", "clipscore,tigerscore", *arguments])
    assert message in capsys.readouterr().err


def test_a_family_is_measured_against_its_originals_commands(speed: Tuple[ModuleType, ModuleType], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """TIGEr with --expert-images: the probe gets the folder and a 36-region item, the whole processes are capeval
    score on the examples and tiger_speed.py on the Expert shape, each original's command is timed, and the
    original's first score comes from what its command printed."""
    script, startup = speed
    probed: List[Dict[str, object]] = []
    ran: List[Sequence[str]] = []

    def probe(spec: Dict[str, object], repeats: int) -> object:
        probed.append(spec)
        if spec == {"import": "torch"}:
            return startup.Best(None, {"import_seconds": 2.5})
        return startup.Best(None, {"import_seconds": 3.0, "construction_seconds": 1.0, "weights_seconds": 0.5,
                                   "first_score_seconds": 4.5})

    def best_of(command: Sequence[str], repeats: int) -> object:
        ran.append(command)
        if command[0] == "bash":
            return startup.Best(40.0 if "examples" in command[2] else 230.0,
                                {"first_score_seconds": 6.0 if "examples" in command[2] else 5.0})
        return startup.Best(5.0 if "score" in command else 46.0)

    monkeypatch.setattr(startup, "probe", probe)
    monkeypatch.setattr(startup, "best_of", best_of)
    arguments = script.parse_arguments(["--families", "tigerscore", "--nltk-data", str(tmp_path), "--expert-images",
                                        "200", "--original", "tigerscore=run examples", "--original",
                                        "tigerscore-expert=run expert", "--work-dir", str(tmp_path)])
    example = (tmp_path / "image1.jpg", "a cat", ["two cats"])
    row, wholes = script.measure_family("tigerscore", arguments, {"scan": lambda: tmp_path / "scan"}, example,
                                        tmp_path / "inputs")
    assert probed == [{"import": "torch"},
                      {"scorer": "TIGErScore", "model": str(tmp_path / "scan"), "nltk_data": str(tmp_path),
                       "item": {"regions": [36, 2048], "candidate": "a cat", "references": ["two cats"]}}]
    assert (row.floor_seconds, row.import_seconds, row.construction_seconds, row.weights_seconds,
            row.first_score_seconds, row.original_first_score_seconds) == (2.5, 3.0, 1.0, 0.5, 4.5, 5.0)
    assert [(whole.workload, whole.seconds, whole.original_seconds) for whole in wholes] == [
        ("CLIP-S example images (seeded regions), `capeval score`", 5.0, 40.0),
        ("Expert shape, 200 images, `tiger_speed.py`", 46.0, 230.0)]
    assert ran[0][2:6] == ["capeval", "score", "--metric", "tigerscore"]
    assert "--regions" in ran[0] and ran[1] == ["bash", "-c", "run examples"]
    assert ran[2][1].endswith("tiger_speed.py") and ran[2][2:4] == ["--images", "200"]
    assert ran[3] == ["bash", "-c", "run expert"]


def test_without_nltk_data_tiger_is_imported_only(speed: Tuple[ModuleType, ModuleType], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    script, startup = speed
    monkeypatch.setattr(startup, "probe", lambda spec, repeats: startup.Best(None, {"import_seconds": 3.0}))
    arguments = script.parse_arguments(["--families", "tigerscore", "--work-dir", str(tmp_path)])
    row, wholes = script.measure_family("tigerscore", arguments, {}, (tmp_path, "a", ["b"]), tmp_path)
    assert (row.floor_seconds, row.import_seconds, row.construction_seconds, wholes) == (3.0, 3.0, None, [])
    assert row.notes == ["tigerscore: construction, first score and whole process not measured (--nltk-data)"]


def test_the_json_and_markdown_output(speed: Tuple[ModuleType, ModuleType], tmp_path: Path,
                                      capsys: pytest.CaptureFixture) -> None:
    script, startup = speed
    arguments = script.parse_arguments(["--families", "clipscore", "--json-out", str(tmp_path / "out.json"),
                                        "--markdown-out", str(tmp_path / "out.md")])
    rows = [startup.FamilyStartup("clipscore", 3.6, 3.0, 0.5, 0.2, 5.0)]
    script.report(arguments, "2026-11-27 12:00", [1.0, 2.0], "a machine", 3.0, rows,
                  [startup.WholeProcess("clipscore", "examples", 5.5)])
    written = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    assert written["import_torch_seconds"] == 3.0 and written["load_averages"] == [1.0, 2.0]
    assert written["families"][0]["construction_seconds"] == 0.5
    assert written["whole_processes"] == [{"family": "clipscore", "workload": "examples", "seconds": 5.5,
                                           "original_seconds": None}]
    assert "FAIL  clipscore import <= import torch + 0.5 s" in written["targets"][0]
    assert "| clipscore | 3.00 | 3.60 | +0.60 | 0.50 | 0.20 | 5.00 | not given |" in capsys.readouterr().out
    markdown = (tmp_path / "out.md").read_text(encoding="utf-8").splitlines()
    assert markdown[0].startswith("Date 2026-11-27 12:00; machine: a machine; one-minute load average 1.0-2.0")
    assert "| clipscore | examples | 5.50 | not given |  |" in markdown
    assert markdown[-2:] == [written["targets"][-1], "```"]

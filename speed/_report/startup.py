"""The start-up section (issue 38): what a user waits for before the first score, each figure the best of N fresh
processes. Measured: the ``import torch`` floor, ``import capeval`` with each family's scorer class, the scorer's
construction from a local converted folder beside one read of that folder's weights, the first item's score (from the
process's first line), and whole processes (``capeval score`` on the example images, and the original's own command
where one is given). Printed as one table and one PASS, FAIL or SKIP line per target:

1. importing capeval and a scorer class costs at most the ``import torch`` floor + 0.5 s;
2. the construction costs at most one read of the folder's weights + 0.5 s;
3. TIGEr's whole process at least 8x faster than its original's, and no family slower to its first score than its
   original (each only where the original's figure is given).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence

from _paths import REPO_ROOT
from _report.output import _verdict as verdict  # the report's PASS/FAIL/SKIP line, shared

PROBE = REPO_ROOT / "speed" / "_report" / "startup_probe.py"
IMPORT_ALLOWANCE = 0.5
"""Seconds that importing capeval and a scorer class may cost beyond ``import torch`` (target 1)."""
CONSTRUCTION_ALLOWANCE = 0.5
"""Seconds that a scorer's construction may cost beyond one read of its folder's weights (target 2)."""
TIGER_WHOLE_RATIO = 8.0
"""TIGEr's whole process against its original's (target 3)."""
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_EVALUATE_OFFLINE": "1"}


@dataclass
class Best:
    """The best (smallest) of each figure over the repeats, with the wall seconds of the whole process, or the
    failure's last line of error output."""

    wall_seconds: Optional[float] = None
    figures: Dict[str, float] = field(default_factory=dict)
    error: Optional[str] = None


def best_of(command: Sequence[str], repeats: int, timeout: float = 1800.0) -> Best:
    """``command`` run ``repeats`` times, each a fresh process with the offline environment and this checkout first
    on ``PYTHONPATH``: the smallest wall time from its start to its exit and, per key, the smallest value of the JSON
    object that its last line of output may print. The first failure stops the repeats: its error (the object's
    ``error`` or the last line of error output) is returned with the figures printed so far."""
    environment = {**os.environ, **OFFLINE,
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    best = Best()
    for _ in range(repeats):
        started = time.perf_counter()
        done = subprocess.run(list(command), capture_output=True, text=True, env=environment, timeout=timeout)
        wall = time.perf_counter() - started
        printed = last_json(done.stdout)
        for key, value in printed.items():
            if isinstance(value, (int, float)):
                best.figures[key] = min(value, best.figures.get(key, value))
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
            best.error = str(printed.get("error", lines[-1]))
            return best
        best.wall_seconds = wall if best.wall_seconds is None else min(best.wall_seconds, wall)
    return best


def last_json(output: str) -> Dict[str, object]:
    """The JSON object of ``output``'s last line, or an empty one."""
    lines = output.strip().splitlines()
    try:
        printed = json.loads(lines[-1]) if lines else None
    except ValueError:
        return {}
    return printed if isinstance(printed, dict) else {}


def probe(spec: Mapping[str, object], repeats: int) -> Best:
    """:mod:`_report.startup_probe` on ``spec``, best of ``repeats`` fresh processes."""
    return best_of([sys.executable, str(PROBE), json.dumps(spec)], repeats)


@dataclass
class FamilyStartup:
    """One family's start-up figures (seconds; ``None`` where not measured, ``notes`` saying why)."""

    family: str
    import_seconds: Optional[float] = None
    floor_seconds: Optional[float] = None
    """``import torch`` measured right before this family's import (the load of a shared machine moves in a run)."""
    construction_seconds: Optional[float] = None
    weights_seconds: Optional[float] = None
    first_score_seconds: Optional[float] = None
    original_first_score_seconds: Optional[float] = None
    notes: List[str] = field(default_factory=list)


@dataclass
class WholeProcess:
    """One family's whole processes on one workload: capeval's and, where its command was given, the original's."""

    family: str
    workload: str
    seconds: Optional[float]
    original_seconds: Optional[float] = None

    def ratio(self) -> Optional[float]:
        """How many times faster capeval's process is than the original's."""
        if self.seconds is None or self.original_seconds is None:
            return None
        return self.original_seconds / self.seconds


def _seconds(value: Optional[float], missing: str = "") -> str:
    return missing if value is None else f"{value:.2f}"


def startup_table(floor: float, families: Sequence[FamilyStartup], wholes: Sequence[WholeProcess]) -> List[str]:
    """Two Markdown tables: per family, the floor measured beside it, the import (and its excess over that floor), the
    construction, the weights
    read and the first score, with the original's first score; per family and workload, the whole processes."""
    lines = [f"`import torch` floor: {floor:.2f} s at best over the run; each family's import is compared with the "
             "floor measured right before it.", "",
             "| family | import torch s | import s | over floor s | construction s | weights read s | first score s | "
             "original's first score s |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in families:
        family_floor = floor if row.floor_seconds is None else row.floor_seconds
        over = None if row.import_seconds is None else row.import_seconds - family_floor
        lines.append(f"| {row.family} | {family_floor:.2f} | {_seconds(row.import_seconds, 'failed')} | "
                     f"{'' if over is None else f'{over:+.2f}'} | "
                     f"{_seconds(row.construction_seconds)} | {_seconds(row.weights_seconds)} | "
                     f"{_seconds(row.first_score_seconds)} | {_seconds(row.original_first_score_seconds, 'not given')} "
                     f"|")
    lines += ["", "| family | whole process of | capeval s | original s | original / capeval |",
              "| --- | --- | ---: | ---: | ---: |"]
    for whole in wholes:
        ratio = whole.ratio()
        lines.append(f"| {whole.family} | {whole.workload} | {_seconds(whole.seconds, 'failed')} | "
                     f"{_seconds(whole.original_seconds, 'not given')} | {'' if ratio is None else f'{ratio:.2f}x'} |")
    return lines


def startup_verdicts(floor: float, families: Sequence[FamilyStartup], wholes: Sequence[WholeProcess]) -> List[str]:
    """The PASS, FAIL or SKIP line of each target for each family (and, for TIGEr's ratio, each workload) it
    concerns."""
    lines = []
    for row in families:
        target = f"{row.family} import <= import torch + {IMPORT_ALLOWANCE:g} s"
        family_floor = floor if row.floor_seconds is None else row.floor_seconds
        if row.import_seconds is None:
            lines.append(verdict(None, target, "not measured"))
        else:
            lines.append(verdict(row.import_seconds <= family_floor + IMPORT_ALLOWANCE, target,
                                 f"{row.import_seconds:.2f} s, import torch {family_floor:.2f} s "
                                 f"({row.import_seconds - family_floor:+.2f} s)"))
    for row in families:
        target = f"{row.family} construction <= weights read + {CONSTRUCTION_ALLOWANCE:g} s"
        if row.construction_seconds is None or row.weights_seconds is None:
            lines.append(verdict(None, target, "not measured (no model folder)"))
        else:
            lines.append(verdict(row.construction_seconds <= row.weights_seconds + CONSTRUCTION_ALLOWANCE, target,
                                 f"{row.construction_seconds:.2f} s, weights read {row.weights_seconds:.2f} s "
                                 f"({row.construction_seconds - row.weights_seconds:+.2f} s)"))
    target = f"tigerscore whole process >= {TIGER_WHOLE_RATIO:g}x faster than its original's"
    tiger = [whole for whole in wholes if whole.family == "tigerscore"]
    for whole in tiger:
        ratio = whole.ratio()
        lines.append(verdict(None, f"{target} ({whole.workload})", "no figure of both")
                     if ratio is None or whole.seconds is None or whole.original_seconds is None else
                     verdict(ratio >= TIGER_WHOLE_RATIO, f"{target} ({whole.workload})",
                             f"{ratio:.2f}x ({whole.seconds:.2f} s against {whole.original_seconds:.2f} s)"))
    if not tiger:
        lines.append(verdict(None, target, "tigerscore not run"))
    for row in families:
        target = f"{row.family} first score no slower than its original's"
        if row.first_score_seconds is None or row.original_first_score_seconds is None:
            lines.append(verdict(None, target, "no first-score figure of both (capeval's and the original's)"))
        else:
            lines.append(verdict(row.first_score_seconds <= row.original_first_score_seconds, target,
                                 f"{row.first_score_seconds:.2f} s against {row.original_first_score_seconds:.2f} s"))
    return lines

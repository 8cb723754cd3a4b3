"""The figures of the original implementations, measured outside the repository and read from one JSON file
(``report.py --originals FILE``; how each is made is in speed/README.md). Schema::

    {
      "tigerscore":   FIGURE,
      "vilbertscore": FIGURE,
      "bridge":       FIGURE,
      "emscore":      the EMScorer runner's JSON, as video_speed.py --original-json reads it:
                      {"tool", "commit", "date", "machine", "peers": {peer: {"items", "videos", "seconds",
                       "cpu_seconds", "children_cpu_seconds", "peak_rss_mb", ...}}},
      "polos":        the polos wheel's runner's JSON, as polos_speed.py --original-json reads it: the FIGURE
                      fields with "cpu_seconds" and "peak_rss_mb", and "workload_id", "batch_size", "scores"
                      (the default batch's per-item scores; "seconds_batch_1" and "scores_batch_1" optional)
    }

    FIGURE = {"tool": str, "commit": str, "date": "YYYY-MM-DD", "machine": str, "command": str,
              "images": int, "items": int, "seconds": float,
              "cpu_seconds": float (optional), "peak_rss_mb": float (optional), "threads": int (optional)}

Every family is optional. ``seconds`` is the original's wall time for scoring ``items`` items of the Flickr8k-Expert
shape on the first ``images`` images (model loaded before the clock, as capeval's scripts time it). A figure is
compared with capeval's only when its ``images`` and ``items`` equal the run's (for Polos: its ``workload_id``, the
hash of polos_speed.py's items): a figure of another workload is shown but gets no ratio.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional

FIGURE_FAMILIES = ("tigerscore", "vilbertscore", "bridge", "polos")
REQUIRED = {"tool": str, "date": str, "machine": str, "images": int, "items": int, "seconds": (int, float)}
REQUIRED_POLOS = {**REQUIRED, "cpu_seconds": (int, float), "peak_rss_mb": (int, float), "workload_id": str,
                  "batch_size": int, "scores": list}
"""The wheel's runner's JSON: a FIGURE with the fields polos_speed.py reads."""


@dataclass(frozen=True)
class Originals:
    """The file's figures, with the file's name for the table's provenance."""

    path: Path
    figures: Dict[str, Dict[str, Any]]

    def figure(self, family: str) -> Optional[Dict[str, Any]]:
        return self.figures.get(family)

    def provenance(self, family: str) -> str:
        """Where a family's figure comes from: the file, its date and machine (what the table prints)."""
        figure = self.figures[family]
        return f"read from {self.path.name} (dated {figure.get('date', '?')}, machine: {figure.get('machine', '?')})"


def load_originals(path: Optional[Path]) -> Optional[Originals]:
    """The figures of ``path`` (None without a file), checked against the schema; SystemExit naming the family and
    field that is wrong."""
    if path is None:
        return None
    try:
        figures = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise SystemExit(f"--originals {path}: cannot read it as JSON ({error})") from None
    if not isinstance(figures, dict):
        raise SystemExit(f"--originals {path}: the top level must be an object of families")
    unknown = sorted(set(figures) - {*FIGURE_FAMILIES, "emscore"})
    if unknown:
        raise SystemExit(f"--originals {path}: unknown families {unknown}; known: {[*FIGURE_FAMILIES, 'emscore']}")
    for family in FIGURE_FAMILIES:
        figure = figures.get(family)
        if figure is None:
            continue
        for field, kind in (REQUIRED_POLOS if family == "polos" else REQUIRED).items():
            if not isinstance(figure.get(field), kind):
                raise SystemExit(f"--originals {path}: {family}.{field} is missing or not a {kind}")
    polos = figures.get("polos")
    if polos is not None and len(polos["scores"]) != polos["items"]:
        raise SystemExit(f"--originals {path}: polos.scores holds {len(polos['scores'])} scores for "
                         f"{polos['items']} items")
    emscore = figures.get("emscore")
    if emscore is not None and not isinstance(emscore.get("peers"), dict):
        raise SystemExit(f"--originals {path}: emscore must be the EMScorer runner's JSON, with 'peers'")
    return Originals(path, figures)

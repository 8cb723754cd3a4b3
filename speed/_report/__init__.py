"""The parts of ``report.py``: the figure file of the originals, each family's measurements, and the table and target
lines; and of ``startup.py``: the start-up measurements and their table.

``_paths`` is imported first, so that every part imports this checkout's ``capeval``.
"""
import argparse
import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import _paths  # noqa: F401


def chosen_families(parser: argparse.ArgumentParser, text: str, known: Sequence[str]) -> List[str]:
    """The families of a comma-separated ``--families`` value; a parser error names those not in ``known``."""
    families = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in families if name not in known]
    if unknown or not families:
        parser.error(f"--families: choose from {', '.join(known)} (got {unknown or 'none'})")
    return families


def publish(header: Sequence[str], table: Sequence[str], notes: Sequence[str], targets: Sequence[str],
            markdown_out: Optional[Path], json_out: Optional[Path], figures: Dict[str, Any]) -> None:
    """Print the header, the table, the notes and the target lines; write them as Markdown to ``markdown_out``, and
    ``figures`` with the target lines as JSON to ``json_out`` (each where given)."""
    print("\n".join(["", *header, *table, "", *notes, "", *targets]))
    if markdown_out is not None:
        markdown_out.write_text("\n".join([*header, *table, "", *(f"- {note}" for note in notes), "", "```",
                                           *targets, "```", ""]), encoding="utf-8")
    if json_out is not None:
        json_out.write_text(json.dumps({**figures, "targets": list(targets)}, indent=1), encoding="utf-8")

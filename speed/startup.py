"""The start-up report (issue 38): importing, constructing, the first score and whole processes, each the best of N
fresh processes, with the ``import torch`` floor measured in the same run, and PASS/FAIL per target.

    python speed/startup.py [--families clipscore,tigerscore,...] [--repeats 5] [--full-size] [--work-dir DIR]
                            [--nltk-data ROOT] [--original FAMILY=COMMAND ...] [--json-out FILE]
                            [--markdown-out FILE]

Every family's import is measured. Construction, the weights read and the first score need a model folder: by
default the cheap ones (the tests' tiny CLIP for CLIP-S and EMScore, the random full-size SCAN of ``_models.py`` for
TIGEr, which is small); ``--full-size`` builds ``_models.py``'s full-size random folders (ViT-B/32, ViLBERT, Polos
and BRIDGE too; minutes and gigabytes on first use). The whole process is ``python -m capeval score`` on the
CLIP-S example images (for TIGEr, with seeded random regions of them; for EMScore, the example clip). TIGEr needs
``--nltk-data`` (punkt_tab) for its first score and whole process. ``--original FAMILY=COMMAND`` (repeated) gives an
original's whole process, a shell command run outside the repository's code (speed/README.md), timed in the same
way; if its last line of output is a JSON object with ``first_score_seconds`` (from its first line to its first
score), that is the original's first-score figure.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, NamedTuple, Optional, Sequence

from _paths import REPO_ROOT

if TYPE_CHECKING:
    from _report.startup import FamilyStartup

EXAMPLES = REPO_ROOT.parent / "shared" / "data" / "examples"
"""The reference repositories' example inputs (``shared/data/examples`` beside the repository)."""


class StartupFamily(NamedTuple):
    """A family as the start-up report measures it: its scorer class, the probe's first item, and which model folder
    it is made from at the cheap sizes and at full size (``None``: not measured at that size)."""

    scorer: str
    item: Optional[str]
    cheap: Optional[str]
    full: Optional[str]


FAMILIES: Dict[str, StartupFamily] = {
    "clipscore": StartupFamily("CLIPScore", "image", "tiny-clip", "clip"),
    "pacscore": StartupFamily("PACScore", None, None, None),
    "emscore": StartupFamily("EMScore", "video", "tiny-clip", "clip"),
    "tigerscore": StartupFamily("TIGErScore", "regions-36", "scan", "scan"),
    "vilbertscore": StartupFamily("ViLBERTScore", "regions-100", None, "vilbert"),
    "polos": StartupFamily("Polos", "image", None, "polos"),
    "bridge": StartupFamily("BRIDGEScore", "image", None, "bridge"),
}
"""PAC-S runs CLIP-S's code path (its import is measured; the CLIP-S row stands for the rest)."""


def parse_arguments(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--families", default=",".join(FAMILIES),
                        help=f"comma-separated subset of {', '.join(FAMILIES)} (default: all)")
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per figure, the best kept")
    parser.add_argument("--full-size", action="store_true", help="the full-size random model folders")
    parser.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "capeval-bench",
                        help="where the model folders are built and kept")
    parser.add_argument("--nltk-data", type=Path, help="NLTK data root with tokenizers/punkt_tab (TIGEr)")
    parser.add_argument("--original", action="append", default=[], metavar="FAMILY=COMMAND",
                        help="an original's whole process as a shell command, repeated")
    parser.add_argument("--json-out", type=Path)
    parser.add_argument("--markdown-out", type=Path, help="write the table and the target lines as Markdown")
    arguments = parser.parse_args(argv)
    arguments.families = [name.strip() for name in arguments.families.split(",") if name.strip()]
    unknown = [name for name in arguments.families if name not in FAMILIES]
    if unknown or not arguments.families:
        parser.error(f"--families: choose from {', '.join(FAMILIES)} (got {unknown or 'none'})")
    if arguments.repeats < 1:
        parser.error(f"--repeats must be at least 1 (got {arguments.repeats})")
    arguments.original = original_commands(parser, arguments.original, arguments.families)
    return arguments


def original_commands(parser: argparse.ArgumentParser, given: Sequence[str], families: Sequence[str]
                      ) -> Dict[str, str]:
    """``--original`` values (``FAMILY=COMMAND``) as {family: command}; a parser error names a malformed value, a
    family that is not run or one given twice."""
    commands: Dict[str, str] = {}
    for text in given:
        family, equals, command = text.partition("=")
        if not equals or not command.strip() or family not in families:
            parser.error(f"--original {text!r}: FAMILY=COMMAND with FAMILY one of {', '.join(families)}")
        if family in commands:
            parser.error(f"--original {text!r}: {family} is given twice")
        commands[family] = command
    return commands


def model_folders(work_dir: Path, captions: Sequence[str]) -> Dict[str, Callable[[], Path]]:
    """Folder kind -> the function that builds it under ``work_dir`` on first use (and returns it)."""
    import _models

    def tiny_clip() -> Path:
        folder = work_dir / "startup-tiny-clip"
        if not (folder / "tiny_openai_hf" / "model.safetensors").is_file():
            sys.path.insert(0, str(REPO_ROOT / "tests"))
            from fixtures.clip_checkpoints import make_tiny_clip

            make_tiny_clip("openai", folder, fp16_values=True)
        return folder / "tiny_openai_hf"

    return {"tiny-clip": tiny_clip, "clip": lambda: _models.random_vit_b32_folder(work_dir),
            "scan": lambda: _models.random_scan_folder(work_dir),
            "vilbert": lambda: _models.random_vilbert_folder(work_dir / f"random-vilbert-seed{_models.SEED}",
                                                             captions),
            "polos": lambda: _models.random_polos_folder(work_dir, captions),
            "bridge": lambda: _models.random_bridge_folder(work_dir, captions)}


def probe_item(kind: str, image: Path, candidate: str, references: Sequence[str]) -> Dict[str, object]:
    """The probe's first item of ``kind`` (see :mod:`_report.startup_probe`)."""
    inputs: Dict[str, object] = ({"image": str(image)} if kind == "image" else {"video": str(EXAMPLES / "emscore" /
                                 "Bfyp0C02sko_000248_000258.mp4")} if kind == "video" else
                                 {"regions": [int(kind.split("-")[1]), 2048]})
    return {**inputs, "candidate": candidate, "references": list(references)}


def score_command(family: str, folder: Path, inputs: Path) -> List[str]:
    """``capeval score`` of ``family`` with ``folder`` on the example inputs written under ``inputs``."""
    clipscore = EXAMPLES / "clipscore"
    command = [sys.executable, "-m", "capeval", "score", "--metric", family, "--model", str(folder), "--device", "cpu",
               "--output", str(inputs / f"{family}-scores.json")]
    if family == "emscore":
        return [*command, "--jsonl", str(inputs / "emscore.jsonl")]
    pairs = ["--candidates", str(clipscore / "good_captions.json"), "--references", str(clipscore / "refs.json")]
    if family in ("tigerscore", "vilbertscore"):
        return [*command, "--regions", str(inputs / f"regions-{family}.npz"), *pairs]
    return [*command, "--images", str(clipscore / "images"), *pairs]


def write_inputs(inputs: Path) -> None:
    """The whole process's inputs that the examples lack: EMScore's example as JSON lines, and seeded random regions
    of the CLIP-S example images (36 per image for TIGEr, 100 with boxes for ViLBERTScore)."""
    import numpy as np

    example = json.loads((EXAMPLES / "emscore" / "example.json").read_text(encoding="utf-8"))
    (inputs / "emscore.jsonl").write_text(json.dumps({
        "video": str(EXAMPLES / "emscore" / example["video"]), "candidate": example["candidates"][0],
        "references": example["references"][0]}) + "\n", encoding="utf-8")
    ids = sorted(json.loads((EXAMPLES / "clipscore" / "good_captions.json").read_text(encoding="utf-8")))
    rng = np.random.default_rng(0)
    for family, rows in (("tigerscore", 36), ("vilbertscore", 100)):
        dtype = np.dtype([("features", np.float32, (rows, 2048)), ("boxes", np.float32, (rows, 4)),
                          ("image_size", np.float32, (2,))])
        records = {}
        for name in ids:
            record = np.zeros((), dtype=dtype)
            record["features"] = rng.random((rows, 2048), dtype=np.float32) * 2
            record["boxes"] = np.tile(np.array([0.0, 0.0, 320.0, 240.0], dtype=np.float32), (rows, 1))
            record["image_size"] = (640.0, 480.0)
            records[name] = record
        np.savez(inputs / f"regions-{family}.npz", **records)


def main(argv: Optional[Sequence[str]] = None) -> None:
    arguments = parse_arguments(argv)
    from _report.startup import FamilyStartup, best_of, probe
    from report import machine

    started, loads = time.strftime("%Y-%m-%d %H:%M"), [os.getloadavg()[0]]
    candidates = json.loads((EXAMPLES / "clipscore" / "good_captions.json").read_text(encoding="utf-8"))
    references = json.loads((EXAMPLES / "clipscore" / "refs.json").read_text(encoding="utf-8"))
    image_id = sorted(candidates)[0]
    if arguments.nltk_data is not None:
        os.environ["NLTK_DATA"] = str(arguments.nltk_data)  # for capeval score's processes
    folders = model_folders(arguments.work_dir, [caption for refs in references.values() for caption in refs])
    floor = probe({"import": "torch"}, arguments.repeats)
    if floor.error is not None:
        raise SystemExit(f"import torch failed: {floor.error}")
    print(f"import torch floor: {floor.figures['import_seconds']:.2f} s", flush=True)
    rows: List[FamilyStartup] = []
    with tempfile.TemporaryDirectory(prefix="capeval-startup-") as work:
        inputs = Path(work)
        write_inputs(inputs)
        for name in arguments.families:
            family = FAMILIES[name]
            row = FamilyStartup(name)
            kind = family.full if arguments.full_size else family.cheap
            folder = None if kind is None else folders[kind]()
            item = None
            if family.item is not None and (not family.item.startswith("regions-36") or arguments.nltk_data):
                item = probe_item(family.item, EXAMPLES / "clipscore" / "images" / f"{image_id}.jpg",
                                  candidates[image_id], references[image_id])
            elif family.item is not None:
                row.notes.append(f"{name}: first score and whole process not measured (they need --nltk-data)")
            spec = {"scorer": family.scorer, "model": None if folder is None else str(folder), "item": item,
                    "nltk_data": None if arguments.nltk_data is None else str(arguments.nltk_data)}
            measured = probe(spec, arguments.repeats)
            if measured.error is not None:
                row.notes.append(f"{name}: the probe failed: {measured.error}")
            row.import_seconds = measured.figures.get("import_seconds")
            row.construction_seconds = measured.figures.get("construction_seconds")
            row.weights_seconds = measured.figures.get("weights_seconds")
            row.first_score_seconds = measured.figures.get("first_score_seconds")
            if folder is None:
                row.notes.append(f"{name}: no model folder at {'full' if arguments.full_size else 'the cheap'} "
                                 f"size{'' if arguments.full_size or family.full is None else ' (--full-size)'}")
            elif item is not None:
                whole = best_of(score_command(name, folder, inputs), arguments.repeats)
                row.whole_seconds = whole.wall_seconds
                if whole.error is not None:
                    row.notes.append(f"{name}: capeval score failed: {whole.error}")
            if name in arguments.original:
                original = best_of(["bash", "-c", arguments.original[name]], arguments.repeats)
                row.original_tool = "given command"
                row.original_whole_seconds = original.wall_seconds
                row.original_first_score_seconds = original.figures.get("first_score_seconds")
                if original.error is not None:
                    row.notes.append(f"{name}: the original's command failed: {original.error}")
            rows.append(row)
            loads.append(os.getloadavg()[0])
            print(f"{name}: done", flush=True)
    report(arguments, started, loads, machine(), floor.figures["import_seconds"], rows)


def report(arguments: argparse.Namespace, started: str, loads: Sequence[float], host: str, floor: float,
           rows: Sequence["FamilyStartup"]) -> None:
    """Print the header, the table, the notes and the target lines; write the Markdown and JSON files asked for."""
    from _report.startup import startup_table, startup_verdicts

    header = [f"Date {started}; machine: {host}; one-minute load average {min(loads):.1f}-{max(loads):.1f} during "
              f"the run; best of {arguments.repeats} fresh processes per figure; "
              f"{'full-size' if arguments.full_size else 'cheap'} model folders.", ""]
    lines, targets = startup_table(floor, rows), startup_verdicts(floor, rows)
    notes = [note for row in rows for note in row.notes]
    print("\n".join(["", *header, *lines, "", *notes, "", *targets]))
    if arguments.markdown_out is not None:
        arguments.markdown_out.write_text("\n".join([*header, *lines, "", *(f"- {note}" for note in notes), "",
                                                     "```", *targets, "```", ""]), encoding="utf-8")
    if arguments.json_out is not None:
        arguments.json_out.write_text(json.dumps({
            "date": started, "machine": host, "load_averages": list(loads), "repeats": arguments.repeats,
            "full_size": arguments.full_size, "import_torch_seconds": floor, "originals": arguments.original,
            "families": [vars(row) for row in rows], "targets": targets}, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()

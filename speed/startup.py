"""The start-up report (issue 38): importing, constructing, the first score and whole processes, each the best of N
fresh processes, with the ``import torch`` floor measured in the same run, and PASS/FAIL per target.

    python speed/startup.py [--families clipscore,tigerscore,...] [--repeats 5] [--full-size] [--work-dir DIR]
                            [--nltk-data ROOT] [--expert-images N] [--original WORKLOAD=COMMAND ...]
                            [--json-out FILE] [--markdown-out FILE]

Every family's import is measured. Construction, the weights read and the first score need a model folder: by
default the cheap ones (the tests' tiny CLIP for CLIP-S and EMScore, the random full-size SCAN of ``_models.py`` for
TIGEr, which is small); ``--full-size`` builds ``_models.py``'s full-size random folders (ViT-B/32, ViLBERT, Polos
and BRIDGE too; minutes and gigabytes on first use). The whole process is ``python -m capeval score`` on the
CLIP-S example images (for TIGEr and ViLBERTScore, seeded random regions of them; for EMScore, the example clip)
and, with ``--expert-images N``, TIGEr's ``tiger_speed.py`` on the Expert shape of the first N images. TIGEr needs
``--nltk-data`` (punkt_tab). ``--original WORKLOAD=COMMAND`` (repeated; WORKLOAD a family, for its examples, or
``tigerscore-expert``) gives an original's whole process, a shell command running a runner kept outside the
repository (speed/README.md), timed in the same way; if its last line of output is a JSON object with
``first_score_seconds`` (from its first line to its first score), that is the original's first-score figure.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from _paths import REPO_ROOT
from _report import chosen_families, publish

if TYPE_CHECKING:
    from _report.startup import FamilyStartup, WholeProcess

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


def workload_label(workload: str, expert_images: int) -> str:
    """The whole process's workload as the table names it: a family's examples, or TIGEr's Expert shape."""
    if workload == "tigerscore-expert":
        return f"Expert shape, {expert_images} images, `tiger_speed.py`"
    if workload == "emscore":
        return "the EMScore example clip, `capeval score --jsonl`"
    regions = " (seeded regions)" if workload in ("tigerscore", "vilbertscore") else ""
    return f"CLIP-S example images{regions}, `capeval score`"


def parse_arguments(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--families", default=",".join(FAMILIES),
                        help=f"comma-separated subset of {', '.join(FAMILIES)} (default: all)")
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per figure, the best kept")
    parser.add_argument("--full-size", action="store_true", help="the full-size random model folders")
    parser.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "capeval-bench",
                        help="where the model folders are built and kept")
    parser.add_argument("--nltk-data", type=Path, help="NLTK data root with tokenizers/punkt_tab (TIGEr)")
    parser.add_argument("--expert-images", type=int, default=0, metavar="N",
                        help="also TIGEr's whole process on the Expert shape of the first N images (tiger_speed.py)")
    parser.add_argument("--original", action="append", default=[], metavar="WORKLOAD=COMMAND",
                        help="an original's whole process as a shell command, repeated; WORKLOAD: a family (its "
                             "examples) or tigerscore-expert")
    parser.add_argument("--json-out", type=Path)
    parser.add_argument("--markdown-out", type=Path, help="write the table and the target lines as Markdown")
    arguments = parser.parse_args(argv)
    arguments.families = chosen_families(parser, arguments.families, list(FAMILIES))
    if arguments.repeats < 1:
        parser.error(f"--repeats must be at least 1 (got {arguments.repeats})")
    workloads = [*arguments.families, *(["tigerscore-expert"] if "tigerscore" in arguments.families else [])]
    arguments.original = original_commands(parser, arguments.original, workloads)
    if arguments.expert_images and (arguments.nltk_data is None or "tigerscore" not in arguments.families):
        parser.error("--expert-images: needs tigerscore in --families and --nltk-data")
    return arguments


def original_commands(parser: argparse.ArgumentParser, given: Sequence[str], workloads: Sequence[str]
                      ) -> Dict[str, str]:
    """``--original`` values (``WORKLOAD=COMMAND``) as {workload: command}; a parser error names a malformed value, a
    workload that is not run or one given twice."""
    commands: Dict[str, str] = {}
    for text in given:
        workload, equals, command = text.partition("=")
        if not equals or not command.strip() or workload not in workloads:
            parser.error(f"--original {text!r}: WORKLOAD=COMMAND with WORKLOAD one of {', '.join(workloads)}")
        if workload in commands:
            parser.error(f"--original {text!r}: {workload} is given twice")
        commands[workload] = command
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


def measure_family(name: str, arguments: argparse.Namespace, folders: Mapping[str, Callable[[], Path]],
                   example: Tuple[Path, str, Sequence[str]], inputs: Path
                   ) -> Tuple["FamilyStartup", List["WholeProcess"]]:
    """One family's probe, its whole process on the examples and, for TIGEr with ``--expert-images``, on the Expert
    shape, each against the original's command where one is given."""
    from _report.startup import FamilyStartup, WholeProcess, best_of, probe

    family, row = FAMILIES[name], FamilyStartup(name)
    kind = family.full if arguments.full_size else family.cheap
    folder = item = None
    if family.item is None or kind is None:
        row.notes.append(f"{name}: no model folder at {'full' if arguments.full_size else 'the cheap'} size"
                         f"{'' if arguments.full_size or family.full is None else ' (--full-size)'}")
    elif name == "tigerscore" and arguments.nltk_data is None:
        row.notes.append(f"{name}: construction, first score and whole process not measured (--nltk-data)")
    else:
        folder, item = folders[kind](), probe_item(family.item, *example)
    row.floor_seconds = probe({"import": "torch"}, arguments.repeats).figures.get("import_seconds")
    measured = probe({"scorer": family.scorer, "model": None if folder is None else str(folder), "item": item,
                      "nltk_data": None if arguments.nltk_data is None else str(arguments.nltk_data)},
                     arguments.repeats)
    if measured.error is not None:
        row.notes.append(f"{name}: the probe failed: {measured.error}")
    for figure in ("import", "construction", "weights", "first_score"):
        setattr(row, f"{figure}_seconds", measured.figures.get(f"{figure}_seconds"))
    commands = {} if item is None or folder is None else {name: score_command(name, folder, inputs)}
    if name == "tigerscore" and folder is not None and arguments.expert_images:
        commands["tigerscore-expert"] = [sys.executable, str(REPO_ROOT / "speed" / "tiger_speed.py"), "--images",
                                         str(arguments.expert_images), "--work-dir", str(arguments.work_dir),
                                         "--nltk-data", str(arguments.nltk_data)]
    wholes = []
    for workload, command in commands.items():
        whole = best_of(command, arguments.repeats)
        if whole.error is not None:
            row.notes.append(f"{name}: the whole process ({workload}) failed: {whole.error}")
        wholes.append(WholeProcess(name, workload_label(workload, arguments.expert_images),
                                   whole.wall_seconds))
        if workload in arguments.original:
            original = best_of(["bash", "-c", arguments.original[workload]], arguments.repeats)
            wholes[-1].original_seconds = original.wall_seconds
            first = original.figures.get("first_score_seconds")
            if first is not None:
                row.original_first_score_seconds = min(first, row.original_first_score_seconds or first)
            if original.error is not None:
                row.notes.append(f"{name}: the original's command ({workload}) failed: {original.error}")
    return row, wholes


def main(argv: Optional[Sequence[str]] = None) -> None:
    arguments = parse_arguments(argv)
    from _report.startup import probe
    from report import machine

    started, loads = time.strftime("%Y-%m-%d %H:%M"), [os.getloadavg()[0]]
    if arguments.nltk_data is not None:
        os.environ["NLTK_DATA"] = str(arguments.nltk_data)  # for capeval score's processes
    candidates = json.loads((EXAMPLES / "clipscore" / "good_captions.json").read_text(encoding="utf-8"))
    references = json.loads((EXAMPLES / "clipscore" / "refs.json").read_text(encoding="utf-8"))
    image_id = sorted(candidates)[0]
    example = (EXAMPLES / "clipscore" / "images" / f"{image_id}.jpg", candidates[image_id], references[image_id])
    folders = model_folders(arguments.work_dir, [caption for refs in references.values() for caption in refs])
    floor = probe({"import": "torch"}, arguments.repeats)
    if floor.error is not None:
        raise SystemExit(f"import torch failed: {floor.error}")
    rows, wholes = [], []
    with tempfile.TemporaryDirectory(prefix="capeval-startup-") as work:
        write_inputs(Path(work))
        for name in arguments.families:
            row, family_wholes = measure_family(name, arguments, folders, example, Path(work))
            rows.append(row)
            wholes += family_wholes
            loads.append(os.getloadavg()[0])
            print(f"{name}: measured", flush=True)
    floors = [floor.figures["import_seconds"], *(row.floor_seconds for row in rows if row.floor_seconds is not None)]
    report(arguments, started, loads, machine(), min(floors), rows, wholes)


def report(arguments: argparse.Namespace, started: str, loads: Sequence[float], host: str, floor: float,
           rows: Sequence["FamilyStartup"], wholes: Sequence["WholeProcess"]) -> None:
    """The header, the tables, the notes and the target lines, printed and written where asked."""
    from _report.startup import startup_table, startup_verdicts

    header = [f"Date {started}; machine: {host}; one-minute load average {min(loads):.1f}-{max(loads):.1f} during "
              f"the run; best of {arguments.repeats} fresh processes per figure; "
              f"{'full-size' if arguments.full_size else 'cheap'} model folders.", ""]
    lines, targets = startup_table(floor, rows, wholes), startup_verdicts(floor, rows, wholes)
    notes = [note for row in rows for note in row.notes]
    publish(header, lines, notes, targets, arguments.markdown_out, arguments.json_out, {
        "date": started, "machine": host, "load_averages": list(loads), "repeats": arguments.repeats,
        "full_size": arguments.full_size, "import_torch_seconds": floor, "originals": arguments.original,
        "expert_images": arguments.expert_images, "families": [vars(row) for row in rows],
        "whole_processes": [vars(whole) for whole in wholes]})

if __name__ == "__main__":
    main()

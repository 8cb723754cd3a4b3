"""One performance report: every metric family on its benchmark shape against its strongest peer, with the machine's
fp32 matmul peak measured in the same run.

    python speed/report.py [--quick] [--families clip-s,tigerscore,vilbertscore,bridge,emscore,polos]
                           [--device cpu|cuda] [--images FAMILY=N ...] [--threads T] [--originals FILE]
                           [--json-out FILE] [--markdown-out FILE]

Each family is measured by its own speed script, each run in fresh processes through its ``--json-out``
(``_report/families.py``): ``throughput.py`` (CLIP-S, standing for PAC-S too, against torchmetrics and the
``clipscore.py`` loop), ``tiger_speed.py``, ``vilbertscore_speed.py`` and ``bridge_speed.py`` (the Flickr8k-Expert
shape from precomputed regions, or image files for BRIDGE), ``video_speed.py`` (EMScore on the VATEX-EVAL-shaped
workload) and ``polos_speed.py`` (Polos from the Expert shape's image files). Each is run at its benchmark size and at
a smaller one, for the memory check. The original implementations' figures (TIGEr, ViLBERTScore, BRIDGE, the
EMScorer, the polos wheel's ``predict``) are measured outside the repository and read from ``--originals`` (schema
in ``_report/originals.py``, commands in speed/README.md); the table marks every figure as measured in this run or
read from that file, with the file's date and machine.

Printed: the table (also written as Markdown by ``--markdown-out``), then one PASS, FAIL or SKIP line per target:
every family >= 3x its original end to end, memory flat in items (the larger run's peak within 10% of the smaller
run's; for EMScore, video length), the CLIP, ViLBERT and SCAN GRU forwards at >= 70% of the matmul peak. ``--quick``
uses small sizes (a smoke run of a few minutes on two cores: 40 image files for CLIP-S, 100 / 4 / 2 / 10 Expert
images for TIGEr / ViLBERTScore / BRIDGE / Polos, one video for EMScore). ``--images FAMILY=N`` (repeated) sets one
family's size between those and the full one: N image files for CLIP-S, the first N Expert images for TIGEr,
ViLBERTScore, BRIDGE and Polos, and N // 2 for the memory check.
"""
from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Dict, Optional, Sequence

from _paths import EMSCORE_CLIP, FLICKR8K_DIR
from _report import chosen_families, publish
from _report.families import SIZED_FAMILIES

FAMILY_NAMES = ("clip-s", "tigerscore", "vilbertscore", "bridge", "emscore", "polos")


def parse_arguments(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run of a few minutes")
    parser.add_argument("--families", default=",".join(FAMILY_NAMES),
                        help=f"comma-separated subset of {', '.join(FAMILY_NAMES)} (default: all)")
    parser.add_argument("--device", default="cpu", help="device of the scripts that take one (cpu, cuda, ...)")
    parser.add_argument("--images", action="append", default=[], metavar="FAMILY=N",
                        help=f"one family's benchmark size, repeated (families: {', '.join(SIZED_FAMILIES)}): N "
                             "image files for clip-s, the first N Expert images for the others; the memory check "
                             "runs at N // 2 (overrides --quick's and the full size of that family)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads everywhere")
    parser.add_argument("--originals", type=Path, help="the original implementations' figures (JSON)")
    parser.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "capeval-bench",
                        help="where the random models and workloads are built and kept")
    parser.add_argument("--data-dir", type=Path, default=FLICKR8K_DIR, help="the Flickr8k folder")
    parser.add_argument("--clip", type=Path, default=EMSCORE_CLIP, help="the EMScore example clip")
    parser.add_argument("--nltk-data", type=Path, help="NLTK data root (punkt_tab for TIGEr, the tagger for BRIDGE)")
    parser.add_argument("--json-out", type=Path)
    parser.add_argument("--markdown-out", type=Path, help="write the table and the target lines as Markdown")
    arguments = parser.parse_args(argv)
    arguments.families = chosen_families(parser, arguments.families, list(FAMILY_NAMES))
    arguments.images = family_sizes(parser, arguments.images, arguments.families)
    return arguments


def family_sizes(parser: argparse.ArgumentParser, given: Sequence[str], families: Sequence[str]) -> Dict[str, int]:
    """``--images`` values (``FAMILY=N``) as {family: N}; a parser error names a malformed value, a family that has no
    such size or is not run, a size under 2 (the memory check runs at N // 2) or a family given twice."""
    sizes: Dict[str, int] = {}
    for text in given:
        family, equals, number = text.partition("=")
        if not equals or family not in SIZED_FAMILIES:
            parser.error(f"--images {text!r}: FAMILY=N with FAMILY one of {', '.join(SIZED_FAMILIES)}")
        if family not in families:
            parser.error(f"--images {text!r}: {family} is not in --families")
        if family in sizes:
            parser.error(f"--images {text!r}: {family} is given twice")
        if not number.isdigit() or int(number) < 2:
            parser.error(f"--images {text!r}: N must be a whole number >= 2 (the memory check runs at N // 2)")
        sizes[family] = int(number)
    return sizes


def machine() -> str:
    """CPU model, count, platform and the load average now."""
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as cpuinfo:
            model = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} x {platform.machine()} {model}, {platform.system()} {platform.release()}"


def main(argv: Optional[Sequence[str]] = None) -> None:
    arguments = parse_arguments(argv)
    from _measurement import matmul_flops_per_second
    from _report.families import FAMILIES, Settings
    from _report.originals import load_originals
    from _report.output import as_json, markdown_table, verdicts

    originals = load_originals(arguments.originals)
    started, loads = time.strftime("%Y-%m-%d %H:%M"), [os.getloadavg()[0]]
    peak = matmul_flops_per_second(arguments.threads)
    print(f"fp32 matmul peak: {peak / 1e9:.1f} GFLOP/s ({arguments.threads} threads)", flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="capeval-report-") as out_dir:
        settings = Settings(arguments.device, arguments.threads, arguments.quick, arguments.work_dir,
                            arguments.data_dir, arguments.clip, arguments.nltk_data, Path(out_dir), originals,
                            arguments.images)
        for name in arguments.families:
            results += FAMILIES[name](settings)
            loads.append(os.getloadavg()[0])
    header = [f"Date {started}; machine: {machine()}; torch threads {arguments.threads}; device {arguments.device}; "
              f"one-minute load average {min(loads):.1f}-{max(loads):.1f} during the run.",
              f"fp32 matmul peak (2048^3, best of 10, measured at the start of this run): {peak / 1e9:.1f} GFLOP/s.",
              ""]
    table = markdown_table(results, peak)
    notes = [note for family in results for note in family.notes]
    lines = verdicts(results, peak)
    publish(header, table, notes, lines, arguments.markdown_out, arguments.json_out, {
        "date": started, "machine": machine(), "threads": arguments.threads, "device": arguments.device,
        "load_averages": loads, "matmul_flops_per_second": peak, "quick": arguments.quick, "sizes": arguments.images,
        "originals": None if originals is None else str(originals.path), "families": as_json(results, peak)})


if __name__ == "__main__":
    main()

"""The report's table (one row per tool and workload, as Markdown) and its PASS/FAIL/SKIP lines, one per issue-24
target: every family >= 3x its original end to end, memory flat in items, the ViLBERT, SCAN GRU and CLIP forwards
at >= 70% of the measured fp32 matmul peak."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from _report.families import FamilyResult, Row

TARGET_RATIO = 3.0
TARGET_FLAT_MEMORY = 0.10
"""The larger run's peak memory may exceed the smaller run's by this fraction at most."""
TARGET_FORWARD_FRACTION = 0.70
"""Of the matmul peak: the larger of the rate measured at the run's start and the one measured right after the forward
(the machine may be shared, and its load move between the two), so that a quiet moment never flatters a forward."""
FORWARD_TARGETS = ("CLIP ViT-B/32 image forward", "ViLBERT trunk", "SCAN bidirectional GRU")
"""The forwards the >= 70% target names (matched by the start of the forward's label)."""


def _number(value: Optional[float], digits: int = 1) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def _ratio(capeval: Row, peer: Row) -> Optional[float]:
    return capeval.items_per_second / peer.items_per_second if peer.comparable else None


def _fraction(family: FamilyResult, peak: float) -> str:
    return "; ".join(f"{label}: {100 * rate / max(peak, adjacent):.0f}%"
                     for label, (rate, adjacent) in family.forwards.items())


def markdown_table(families: Sequence[FamilyResult], peak: float) -> List[str]:
    """The table: per family, capeval's row then its peers', with items/s, peak memory, capeval's ratio to each peer
    (by wall time) and, on capeval's row, each forward's fraction of the matmul peak; every row says where its figure
    comes from."""
    lines = ["| family | tool | workload | items | wall s | CPU s | items/s | peak MB | capeval x | forward / matmul "
             "peak | figure |", "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for family in families:
        for row in [family.capeval, *family.peers]:
            ratio = None if row is family.capeval else _ratio(family.capeval, row)
            shown_ratio = _number(ratio, 2) if ratio is not None else ("" if row is family.capeval
                                                                       else "n/a (other workload)")
            lines.append(f"| {family.family} | {row.tool} | {row.workload} | {row.items:,} | {row.seconds:,.1f} | "
                         f"{_number(row.cpu_seconds)} | {row.items_per_second:,.2f} | {_number(row.peak_mb, 0)} | "
                         f"{shown_ratio} | {_fraction(family, peak) if row is family.capeval else ''} | "
                         f"{row.source} |")
    return lines


def _verdict(passed: Optional[bool], target: str, measured: str) -> str:
    label = "SKIP" if passed is None else "PASS" if passed else "FAIL"
    return f"{label}  {target}: {measured}"


def speed_verdicts(families: Sequence[FamilyResult]) -> List[str]:
    """capeval >= 3x each peer end to end (SKIP where no figure of the same workload was given)."""
    lines = []
    for family in families:
        if not family.peers:
            lines.append(_verdict(None, f"{family.family} >= {TARGET_RATIO:g}x its original",
                                  "no figure of the original given (--originals)"))
        for peer in family.peers:
            ratio = _ratio(family.capeval, peer)
            target = f"{family.family} >= {TARGET_RATIO:g}x {peer.tool}"
            if ratio is None:
                lines.append(_verdict(None, target, f"the figure's workload ({peer.workload}, {peer.items:,} items) "
                                                    f"is not this run's ({family.capeval.workload}, "
                                                    f"{family.capeval.items:,} items)"))
                continue
            cpu = ""
            if family.capeval.cpu_seconds and peer.cpu_seconds:
                per_cpu = (family.capeval.items / family.capeval.cpu_seconds) / (peer.items / peer.cpu_seconds)
                cpu = f" (per CPU second {per_cpu:.2f}x)"
            lines.append(_verdict(ratio >= TARGET_RATIO, target, f"{ratio:.2f}x by wall time{cpu}; {peer.source}"))
    return lines


def memory_verdicts(families: Sequence[FamilyResult]) -> List[str]:
    """Peak memory of the larger run within 10% of the smaller run's, net of the engine's bounded memory caches where
    the family's script reports them."""
    lines = []
    for family in families:
        check = family.memory
        if check is None:
            continue
        growth = check.growth()
        peaks = f"{check.small_mb:,.0f} MB ({check.small}) -> {check.large_mb:,.0f} MB ({check.large})"
        net = check.net_mb()
        if net is None:
            target, detail = f"{family.family} memory flat in {family.memory_in}", f"{peaks}, {100 * growth:+.1f}%"
        else:
            target = (f"{family.family} memory flat in {family.memory_in}, net of the engine's memory caches "
                      f"(bounded per row kind)")
            detail = (f"{net[0]:,.0f} -> {net[1]:,.0f} MB, {100 * growth:+.1f}%; peaks {peaks}, of which cached rows "
                      f"{check.small_mb - net[0]:,.0f} -> {check.large_mb - net[1]:,.0f} MB")
        lines.append(_verdict(growth <= TARGET_FLAT_MEMORY, target,
                              f"{detail} (target <= {100 * TARGET_FLAT_MEMORY:.0f}%)"))
    return lines


def forward_verdicts(families: Sequence[FamilyResult], peak: float) -> List[str]:
    """The named forwards at >= 70% of the matmul peak; the others are printed as information."""
    lines = []
    for family in families:
        for label, (rate, adjacent) in family.forwards.items():
            fraction = rate / max(peak, adjacent)
            measured = (f"{rate / 1e9:.1f} model GFLOP/s = {100 * fraction:.0f}% of {max(peak, adjacent) / 1e9:.1f} "
                        f"GFLOP/s (matmul at the run's start {peak / 1e9:.1f}, right after the forward "
                        f"{adjacent / 1e9:.1f})")
            if label.startswith(FORWARD_TARGETS):
                lines.append(_verdict(fraction >= TARGET_FORWARD_FRACTION,
                                      f"{label} >= {100 * TARGET_FORWARD_FRACTION:.0f}% of the matmul peak", measured))
            else:
                lines.append(f"info  {label}: {measured}")
    return lines


def verdicts(families: Sequence[FamilyResult], peak: float) -> List[str]:
    return [*speed_verdicts(families), *memory_verdicts(families), *forward_verdicts(families, peak)]


def as_json(families: Sequence[FamilyResult], peak: float) -> List[Dict[str, object]]:
    """The families' rows and checks as plain data."""
    def row(value: Row) -> Dict[str, object]:
        return {**vars(value), "items_per_second": value.items_per_second}

    return [{"family": family.family, "capeval": row(family.capeval), "peers": [row(peer) for peer in family.peers],
             "memory": None if family.memory is None else vars(family.memory),
             "forwards": {label: {"flops_per_second": rate, "adjacent_matmul_flops_per_second": adjacent,
                                  "fraction_of_peak": rate / max(peak, adjacent)}
                          for label, (rate, adjacent) in family.forwards.items()},
             "notes": family.notes} for family in families]

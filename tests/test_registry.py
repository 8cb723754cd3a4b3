"""capeval.registry: one table of metric families, consistent with the scorers and read without importing torch."""
from __future__ import annotations

import subprocess
import sys

import pytest

from capeval.registry import BENCHMARK_METRICS, FAMILIES, family, scorer_class
from capeval.scorers.base import Scorer


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_family_names_its_scorer_and_results(name: str) -> None:
    entry = FAMILIES[name]
    scorer = scorer_class(name)
    assert issubclass(scorer, Scorer)
    assert scorer.spec.name in entry.result_keys
    assert scorer.references_required == (entry.references == "required")
    assert entry.references in ("optional", "required", "unused")
    for metric in entry.benchmark_metrics.values():
        assert metric.result_key.endswith("s") and metric.result_key[:-1] in entry.result_keys


def test_benchmark_metrics_come_from_the_families() -> None:
    assert BENCHMARK_METRICS["clip_s"][0] == BENCHMARK_METRICS["ref_clip_s"][0] == "clipscore"
    assert BENCHMARK_METRICS["ref_pac_s"] == ("pacscore", FAMILIES["pacscore"].benchmark_metrics["ref_pac_s"])
    assert BENCHMARK_METRICS["ref_pac_s"][1].uses_references and not BENCHMARK_METRICS["pac_s"][1].uses_references


def test_unknown_family_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="known metrics: bridge, clipscore, pacscore, tigerscore, vilbertscore"):
        family("tiger")


def test_importing_capeval_and_the_registry_does_not_import_torch() -> None:
    code = "import sys, capeval, capeval.registry; assert 'torch' not in sys.modules; print(capeval.CLIPScore.__name__)"
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert completed.stdout.strip() == "CLIPScore"

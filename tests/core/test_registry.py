"""capeval.registry: one table of metric families, consistent with the scorers and read without importing torch."""
from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from capeval.registry import BENCHMARK_METRICS, FAMILIES, MODELS, default_model, family, scorer_class
from capeval.scorers.base import Scorer


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_family_names_its_scorer_and_results(name: str) -> None:
    entry = FAMILIES[name]
    scorer = scorer_class(name)
    assert issubclass(scorer, Scorer)
    assert scorer.family is entry
    assert entry.main_result in entry.result_keys
    assert entry.references in ("optional", "required", "unused")
    assert entry.accelerator_precision in ("fp32", "fp16", "bf16")
    assert entry.default_model in MODELS
    for metric in entry.benchmark_metrics.values():
        assert metric.result_key.endswith("s") and metric.result_key[:-1] in entry.result_keys
    assert entry.inputs in ("images", "videos")
    assert set(entry.entries) <= set(inspect.signature(scorer.score).parameters)
    assert set(entry.extra_options) <= set(inspect.signature(scorer.__init__).parameters)


def test_benchmark_metrics_come_from_the_families() -> None:
    assert BENCHMARK_METRICS["clip_s"][0] == BENCHMARK_METRICS["ref_clip_s"][0] == "clipscore"
    assert BENCHMARK_METRICS["ref_pac_s"] == ("pacscore", FAMILIES["pacscore"].benchmark_metrics["ref_pac_s"])
    assert BENCHMARK_METRICS["ref_pac_s"][1].uses_references and not BENCHMARK_METRICS["pac_s"][1].uses_references


def test_every_default_model_is_one_pinned_hub_model() -> None:
    users = [user for model in MODELS.values() for user in model.default_for]
    assert len(users) == len(set(users))
    assert sorted(users) == sorted([*FAMILIES, "detector:bottom-up", "detector:x152-fpn"])
    assert all(MODELS[default_model(user)].revision for user in users)
    with pytest.raises(KeyError, match="no default model for 'detector:none'"):
        default_model("detector:none")


def test_unknown_family_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="known metrics: bridge, clipscore, emscore, pacscore, polos, tigerscore, vilbertscore"):
        family("tiger")


def test_importing_capeval_and_the_registry_does_not_import_torch() -> None:
    code = "import sys, capeval, capeval.registry; assert 'torch' not in sys.modules; print(capeval.CLIPScore.__name__)"
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert completed.stdout.strip() == "CLIPScore"

"""``evaluate.load("capeval/<name>")`` without the hub: the modules shipped with the package, installed into
evaluate's module cache (``capeval download``), loaded offline by a fresh process in the repository root, scoring as
the scorers do; installing again; a local script that evaluate would load instead; another evaluate layout."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict

import evaluate
import evaluate.config
import evaluate.loading
import pytest

import capeval
from capeval.cli import main
from capeval.integrations.module_cache import (MODULES_FOLDER, TESTED_EVALUATE_VERSION, ModuleInstallError,
                                               install_modules, module_script, shadowing_scripts)
from capeval.registry import FAMILIES
from fixtures.clip_checkpoints import TinyClip
from fixtures.paths import REPO_ROOT

LOAD_AND_SCORE = """
import json, sys
import evaluate
from capeval.cli import main
from capeval.registry import FAMILIES

model, images, candidates, references = json.loads(sys.argv[1])
before = None
try:
    evaluate.load("capeval/pacscore")
except FileNotFoundError as error:
    before = str(error)
code = main(["download", "--modules-only"])
modules = {family: evaluate.load(f"capeval/{family}") for family in FAMILIES}
print(json.dumps({
    "before": before, "code": code,
    "modules": {family: [type(module).__module__, module.family] for family, module in modules.items()},
    "pacscore": modules["pacscore"].compute(predictions=candidates, images=images, references=references, model=model),
    "clipscore": modules["clipscore"].compute(predictions=candidates, images=images, model=model),
    "emscore": modules["emscore"].compute(predictions=candidates, references=references, model=model),
}))
"""
"""What a user's fresh Python process does in the repository root: evaluate.load before and after `capeval download
--modules-only`, then scores with the loaded modules; the last line printed is the JSON of what happened."""


@pytest.fixture
def modules_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """evaluate's module cache of this process, empty, under ``tmp_path``."""
    cache = tmp_path / "hf-home" / "modules"
    monkeypatch.setattr(evaluate.config, "HF_MODULES_CACHE", cache)
    monkeypatch.setattr(sys, "path", [*sys.path])  # evaluate puts its module cache on the import path
    return cache


def tree(folder: Path) -> Dict[str, bytes]:
    """Every file under ``folder``: ``{relative path: content}``."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def test_the_tested_evaluate_release_is_installed() -> None:
    assert evaluate.__version__ == TESTED_EVALUATE_VERSION, (
        f"these tests ran with evaluate {evaluate.__version__}: once they pass, record it in TESTED_EVALUATE_VERSION")


def test_modules_ship_with_the_package() -> None:
    assert MODULES_FOLDER == Path(capeval.__file__).parent / "integrations" / "metrics"
    assert sorted(path.name for path in MODULES_FOLDER.iterdir()) == sorted(FAMILIES)
    for family in FAMILIES:
        assert sorted(path.name for path in module_script(family).parent.iterdir() if path.is_file()) == sorted(
            ["README.md", "app.py", f"{family}.py", "requirements.txt"])
    # the checkout's metrics/ is the same folder, not a copy
    assert (REPO_ROOT / "metrics").resolve() == MODULES_FOLDER


def test_install_places_each_module_where_evaluate_caches_it(modules_cache: Path) -> None:
    installed = install_modules()
    assert list(installed) == list(FAMILIES)
    for family, script in installed.items():
        digest = script.parent.name
        assert script == modules_cache / "evaluate_modules" / "metrics" / f"capeval--{family}" / digest / f"{family}.py"
        assert len(digest) == 64 and script.read_bytes() == module_script(family).read_bytes()
        assert json.loads(script.with_suffix(".json").read_text()) == {
            "original file path": str(module_script(family)), "local file path": str(script)}
    before = tree(modules_cache)
    assert install_modules() == installed
    assert tree(modules_cache) == before


def test_installing_again_makes_these_copies_the_ones_evaluate_imports(modules_cache: Path) -> None:
    """A copy of another capeval version, modified later, is what evaluate would import offline; installing again
    puts this version's copy first."""
    script = install_modules()["pacscore"]
    other = script.parent.with_name("f" * 64)
    shutil.copytree(script.parent, other)
    later = script.stat().st_mtime + 60
    os.utime(other / script.name, (later, later))
    factory = evaluate.loading.CachedEvaluationModuleFactory("capeval--pacscore", dynamic_modules_path=str(
        modules_cache / "evaluate_modules"))
    assert factory.get_module().hash == other.name
    install_modules()
    assert factory.get_module().hash == script.parent.name


def test_evaluate_load_works_offline_in_a_fresh_process(tmp_path: Path, tiny_openai_clip: TinyClip) -> None:
    """In the repository root (where the ``capeval/`` package folder is), with the hub unreachable and HF_HOME in a
    temporary folder: before the install, evaluate's own message; after `capeval download --modules-only`, every
    family loads capeval's module, and PAC-S, CLIP-S and EMScore score as their scorers do."""
    model = str(tiny_openai_clip.hf_dir)
    examples = REPO_ROOT / "examples" / "pacscore"
    references = json.loads((examples / "refs.json").read_text())
    captions = json.loads((examples / "good_captions.json").read_text())
    images = [str(examples / "images" / f"{key}.jpg") for key in captions]
    refs = [references[key] for key in captions]
    candidates = list(captions.values())
    environment = {**os.environ, "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_OFFLINE": "1",
                   "HF_EVALUATE_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    environment.pop("HF_MODULES_CACHE", None)
    ran = subprocess.run([sys.executable, "-c", LOAD_AND_SCORE, json.dumps([model, images, candidates, refs])],
                         cwd=REPO_ROOT, env=environment, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    printed, result = ran.stdout.splitlines()[0], json.loads(ran.stdout.splitlines()[-1])
    assert result["before"] == (f"Couldn't find a module script at {REPO_ROOT / 'capeval' / 'pacscore' / 'pacscore.py'}"
                                ". Module 'capeval/pacscore' doesn't exist on the Hugging Face Hub either.")
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert f"```text\n{result['before'].replace(str(REPO_ROOT), '<current folder>')}\n```" in readme
    assert result["code"] == 0
    metrics = tmp_path / "hf-home" / "modules" / "evaluate_modules" / "metrics"
    assert printed == (f"evaluate modules {', '.join(f'capeval/{family}' for family in FAMILIES)}: installed in "
                       f'{metrics} (evaluate.load("capeval/<name>") finds them with no network)')
    for family in FAMILIES:
        (digest,) = [path.name for path in (metrics / f"capeval--{family}").iterdir() if path.is_dir()]
        assert result["modules"][family] == [f"evaluate_modules.metrics.capeval--{family}.{digest}.{family}", family]
    assert result["pacscore"] == capeval.PACScore(model=model).score(images, candidates, refs)
    assert result["clipscore"] == capeval.CLIPScore(model=model).score(images, candidates)
    assert result["emscore"] == capeval.EMScore(model=model).score(None, candidates, refs)
    assert len(set(result["pacscore"]["pac_scores"])) == len(candidates)  # distinct items: none mixed up


def test_a_local_script_that_evaluate_would_load_instead_is_named(modules_cache: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture) -> None:
    folder = tmp_path / "work"
    local = folder / "capeval" / "pacscore" / "pacscore.py"
    local.parent.mkdir(parents=True)
    shutil.copyfile(module_script("pacscore"), local)
    monkeypatch.chdir(folder)
    assert main(["download", "--modules-only"]) == 0
    printed = capsys.readouterr()
    assert printed.err == (
        f'capeval download: warning: in this folder ({folder}), evaluate.load("capeval/pacscore") loads the local '
        "file capeval/pacscore/pacscore.py (evaluate takes a local path first), not capeval's installed module: run "
        "Python from another folder to use the installed module\n")
    # as evaluate does: the local script, under its own name, not capeval--pacscore
    module = evaluate.loading.evaluation_module_factory("capeval/pacscore")
    assert module.module_path.startswith("evaluate_modules.metrics.pacscore.")
    assert shadowing_scripts(REPO_ROOT) == []


class LooksElsewhere(evaluate.loading.CachedEvaluationModuleFactory):
    """evaluate's lookup of cached modules, in another folder than the one its modules are copied to."""

    def __init__(self, name: str, **kwargs: str) -> None:
        super().__init__(name, module_type="measurements", **kwargs)


def test_another_evaluate_layout_is_named(modules_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def message(problem: str) -> str:
        return (f"capeval cannot install its evaluate module capeval/clipscore into evaluate {evaluate.__version__}'s "
                f"module cache ({problem}); capeval's installer was tested with evaluate {TESTED_EVALUATE_VERSION}. "
                "Install that evaluate release, or load the module from its folder: "
                f"evaluate.load({str(MODULES_FOLDER / 'clipscore')!r})")

    monkeypatch.setattr(evaluate.loading, "CachedEvaluationModuleFactory", LooksElsewhere)
    with pytest.raises(ModuleInstallError) as raised:
        install_modules()
    copied = modules_cache / "evaluate_modules" / "metrics" / "capeval--clipscore"
    (digest,) = [path.name for path in copied.iterdir() if path.is_dir()]
    assert str(raised.value) == message(
        f"its lookup of cached modules finds Metric capeval--clipscore is not cached in "
        f"{modules_cache / 'evaluate_modules'}, not evaluate_modules.metrics.capeval--clipscore.{digest}.clipscore")
    monkeypatch.delattr(evaluate.loading, "_create_importable_file")
    with pytest.raises(ModuleInstallError) as raised:
        install_modules()
    assert str(raised.value) == message(
        "AttributeError: module 'evaluate.loading' has no attribute '_create_importable_file'")

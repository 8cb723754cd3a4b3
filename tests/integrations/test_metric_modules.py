"""The evaluate modules in metrics/: offline loading, equality with the scorers, references kept, image forms."""
from __future__ import annotations

import importlib.util
import json
import sys
from types import ModuleType
from typing import Dict, List, Tuple, Type

import evaluate
import pytest
from PIL import Image

import capeval
from capeval.scorers.clipscore import EmbeddingScorer
from fixtures.paths import REPO_ROOT

MODULES: Dict[str, Type[EmbeddingScorer]] = {"clipscore": capeval.CLIPScore, "pacscore": capeval.PACScore}

Examples = Tuple[List[str], List[str], List[List[str]]]


def example_set(name: str) -> Examples:
    """Good then bad captions of examples/<name>: image paths, captions and references of four items."""
    folder = REPO_ROOT / "examples" / name
    references = json.loads((folder / "refs.json").read_text())
    images: List[str] = []
    captions: List[str] = []
    refs: List[List[str]] = []
    for file_name in ("good_captions.json", "bad_captions.json"):
        for key, caption in json.loads((folder / file_name).read_text()).items():
            images.append(str(folder / "images" / f"{key}.jpg"))
            captions.append(caption)
            refs.append(references[key])
    return images, captions, refs


def load_module(name: str) -> evaluate.EvaluationModule:
    return evaluate.load(str(REPO_ROOT / "metrics" / name))


@pytest.fixture(scope="module")
def model_dir(tiny_openai_clip) -> str:
    return str(tiny_openai_clip.hf_dir)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_loads_offline_from_folder(name: str) -> None:
    module = load_module(name)
    assert isinstance(module, evaluate.Metric)
    assert module.name == MODULES[name].family.main_result


@pytest.mark.parametrize("name", sorted(MODULES))
def test_compute_equals_scorer_with_references(name: str, model_dir: str) -> None:
    images, captions, references = example_set(name)
    result = load_module(name).compute(predictions=captions, images=images, references=references, model=model_dir)
    expected = MODULES[name](model=model_dir).score(images, captions, references)
    assert result == expected
    scorer = MODULES[name](model=model_dir)
    assert set(result) == {scorer.metric_name, f"{scorer.metric_name}s", scorer.ref_metric_name,
                           f"{scorer.ref_metric_name}s", "signature"}
    # the tiny model gives distinct, partly non-zero scores here, so mixing up items would show
    assert len(set(result[f"{scorer.metric_name}s"])) >= 3
    assert result[f"{scorer.ref_metric_name}s"] != result[f"{scorer.metric_name}s"]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_compute_without_references(name: str, model_dir: str) -> None:
    images, captions, _ = example_set(name)
    result = load_module(name).compute(predictions=captions, images=images, model=model_dir)
    expected = MODULES[name](model=model_dir).score(images, captions)
    assert result == expected
    main_result = MODULES[name].family.main_result
    assert set(result) == {main_result, f"{main_result}s", "signature"}


def test_pil_images_score_as_paths(model_dir: str) -> None:
    images, captions, references = example_set("clipscore")
    module = load_module("clipscore")
    from_paths = module.compute(predictions=captions, images=images, references=references, model=model_dir)
    pil_images = [Image.open(path) for path in images]
    from_pil = module.compute(predictions=captions, images=pil_images, references=references, model=model_dir)
    assert from_pil == from_paths


def test_add_batch_keeps_references(model_dir: str) -> None:
    images, captions, references = example_set("pacscore")
    module = load_module("pacscore")
    module.add_batch(predictions=captions[:2], references=references[:2])
    module.add_batch(predictions=captions[2:], references=references[2:])
    streamed = module.compute(images=images, model=model_dir)
    assert streamed == capeval.PACScore(model=model_dir).score(images, captions, references)


def test_repeated_compute_reuses_scorer_and_embeddings(model_dir: str) -> None:
    images, captions, references = example_set("clipscore")
    module = load_module("clipscore")
    first = module.compute(predictions=captions, images=images, references=references, model=model_dir)
    (scorer,) = module._scorers.values()
    encoded = dict(scorer.engine.encoded)
    second = module.compute(predictions=captions, images=images, references=references, model=model_dir)
    assert second == first
    assert list(module._scorers.values()) == [scorer]
    assert scorer.engine.encoded == encoded


def test_mixed_references_name_the_item(model_dir: str) -> None:
    images, captions, references = example_set("clipscore")
    module = load_module("clipscore")
    module.add_batch(predictions=captions[:2], references=references[:2])
    module.add_batch(predictions=captions[2:])
    with pytest.raises(capeval.InputError, match=r"references\[2\] is missing"):
        module.compute(images=images, model=model_dir)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"predictions": ["a cat", 3]}, r"predictions\[1\] has type int"),
        ({"predictions": ["a cat", "a dog"], "references": [["a cat"], []]}, r"references\[1\] is empty"),
        ({"predictions": ["a cat", "a dog"], "references": [["a cat"], "a dog"]}, r"references\[1\] must be a list"),
    ],
)
def test_bad_input_names_the_item(kwargs: dict, message: str, model_dir: str) -> None:
    images, _, _ = example_set("clipscore")
    with pytest.raises(capeval.InputError, match=message):
        load_module("clipscore").compute(images=images[:2], model=model_dir, **kwargs)


def test_images_are_required_and_not_added() -> None:
    module = load_module("clipscore")
    with pytest.raises(capeval.InputError, match="images are required"):
        module.compute(predictions=["a cat"])
    with pytest.raises(capeval.InputError, match="keyword of compute"):
        module.add_batch(predictions=["a cat"], images=["cat.jpg"])


def load_space_app(name: str) -> ModuleType:
    """metrics/<name>/app.py imported from its file, as the Space runs it (minus the gradio UI)."""
    spec = importlib.util.spec_from_file_location(f"{name}_space_app", REPO_ROOT / "metrics" / name / "app.py")
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    return app


@pytest.mark.parametrize("name", sorted(MODULES))
def test_space_scoring_function(name: str, model_dir: str) -> None:
    app = load_space_app(name)
    assert "gradio" not in sys.modules
    images, captions, references = example_set(name)
    reference_lines = "\n" + "\n".join(f"  {ref} " for ref in references[0]) + "\n\n"
    result = app.score_caption(images[0], captions[0], reference_lines, model=model_dir)
    assert result == MODULES[name](model=model_dir).score(images[:1], captions[:1], references[:1])
    without_references = app.score_caption(images[1], captions[1], " \n", model=model_dir)
    assert without_references == MODULES[name](model=model_dir).score(images[1:2], captions[1:2])

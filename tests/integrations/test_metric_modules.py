"""The evaluate modules in metrics/: offline loading, equality with the scorers, references kept, image forms, videos
(EMScore, video PAC-S) and what each module takes."""
from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Dict, List, Tuple, Type

import evaluate
import pytest
from PIL import Image

import capeval
from capeval.scorers.clipscore import EmbeddingScorer
from capeval.registry import EMSCORE_RESULT_KEYS
from fixtures.paths import REPO_ROOT
from fixtures.videos import write_scored_clips

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
    with pytest.raises(capeval.InputError, match=r"CLIP-S scores images, not videos: pass compute\(images=\[...\]\)"):
        module.compute(predictions=["a cat"], videos=["cat.mp4"])
    with pytest.raises(capeval.InputError, match="CLIP-S takes no keyword 'num_frames'"):
        module.compute(predictions=["a cat"], images=["cat.jpg"], num_frames=4)


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


# ---------------------------------------------------------------------------------------------------------------------
# Videos: the emscore module, and pacscore's videos=
# ---------------------------------------------------------------------------------------------------------------------

VIDEO_CAPTIONS = ["a cat sits on a mat .", "two dogs run along the road .", "children play in a green park ."]
VIDEO_REFERENCES = [["a cat on a mat .", "a grey cat is sitting ."], ["dogs running ."],
                    ["kids are playing in a park .", "a park with children .", "children run on the grass ."]]


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> List[str]:
    return [str(path) for path in write_scored_clips(tmp_path_factory.mktemp("videos"))]


def test_emscore_module_loads_offline() -> None:
    module = load_module("emscore")
    assert isinstance(module, evaluate.Metric)
    assert "EMScore" in module.description and "ShiYaya/emscore" in module.codebase_urls[0]


def test_emscore_compute_equals_scorer(videos: List[str], model_dir: str) -> None:
    result = load_module("emscore").compute(predictions=VIDEO_CAPTIONS, videos=videos, references=VIDEO_REFERENCES,
                                            model=model_dir)
    expected = capeval.EMScore(model=model_dir).score(videos, VIDEO_CAPTIONS, VIDEO_REFERENCES)
    assert result == expected
    assert set(result) == {*EMSCORE_RESULT_KEYS, *(f"{key}s" for key in EMSCORE_RESULT_KEYS), "signature"}
    assert len(set(result["emscore_video_full_fs"])) == 3
    assert result["signature"].startswith(f"emscore_video_full_f|model:{model_dir}|") and "|idf:references|" in \
        result["signature"]


def test_emscore_options_are_compute_keywords(videos: List[str], model_dir: str) -> None:
    module = load_module("emscore")
    corpus = ["a cat on a mat .", "a dog runs .", "children in a park ."]
    with_corpus = module.compute(predictions=VIDEO_CAPTIONS, videos=videos, model=model_dir, num_frames=3,
                                 idf_corpus=corpus)
    assert with_corpus == capeval.EMScore(model=model_dir, num_frames=3, idf_corpus=corpus).score(
        videos, VIDEO_CAPTIONS)
    assert "|frames:3|" in with_corpus["signature"] and "|idf:corpus-3-" in with_corpus["signature"]
    without_idf = module.compute(predictions=VIDEO_CAPTIONS, videos=videos, model=model_dir, idf=False)
    assert without_idf == capeval.EMScore(model=model_dir, idf=False).score(videos, VIDEO_CAPTIONS)
    assert without_idf["emscore_video_full_fs"] != with_corpus["emscore_video_full_fs"]
    # one scorer per setting; a corpus enters the key as a short digest, and the same corpus finds its scorer again
    assert module.compute(predictions=VIDEO_CAPTIONS, videos=videos, model=model_dir, num_frames=3,
                          idf_corpus=list(corpus)) == with_corpus
    assert len(module._scorers) == 2
    corpus_key = dict(next(key for key in module._scorers if dict(key).get("num_frames") == "3"))
    assert corpus_key["idf_corpus"].startswith("sequence-3-") and len(corpus_key["idf_corpus"]) == 43


def test_emscore_references_alone(model_dir: str) -> None:
    result = load_module("emscore").compute(predictions=VIDEO_CAPTIONS, references=VIDEO_REFERENCES, model=model_dir)
    assert result == capeval.EMScore(model=model_dir).score(None, VIDEO_CAPTIONS, VIDEO_REFERENCES)
    assert {key for key in result if not key.endswith("s")} == {
        key for key in EMSCORE_RESULT_KEYS if key.startswith("emscore_refs_")} | {"signature"}


def test_pacscore_takes_videos(videos: List[str], model_dir: str) -> None:
    module = load_module("pacscore")
    result = module.compute(predictions=VIDEO_CAPTIONS, videos=videos, references=VIDEO_REFERENCES, model=model_dir)
    assert result == capeval.PACScore(model=model_dir).score(videos=videos, candidates=VIDEO_CAPTIONS,
                                                            references=VIDEO_REFERENCES)
    emscore = capeval.EMScore(model=model_dir, precision="fp32").score(videos, VIDEO_CAPTIONS, VIDEO_REFERENCES)
    assert result["pac_scores"] == emscore["emscore_video_full_fs"]
    assert result["ref_pac_scores"] == emscore["emscore_video_refs_full_fs"]
    # the images of the same module still score images, with the same kept scorer
    images, captions, _ = example_set("pacscore")
    assert module.compute(predictions=captions, images=images, model=model_dir) == \
        capeval.PACScore(model=model_dir).score(images, captions)
    assert len(module._scorers) == 1


@pytest.mark.parametrize(
    "name, kwargs, message",
    [
        ("pacscore", {"images": ["a.jpg"], "videos": ["a.mp4"]}, "give images or videos, not both"),
        ("pacscore", {}, r"images or videos are required: pass compute\(images=\[...\]\) or compute\(videos=\[...\]\)"),
        ("pacscore", {"videos": "a.mp4"}, "videos must be a list of videos"),
        ("pacscore", {"videos": ["a.mp4"], "idf": False}, "PAC-S takes no keyword 'idf'"),
        ("emscore", {"images": ["a.jpg"]}, r"EMScore scores videos, not images: pass compute\(videos=\[...\]\)"),
        ("emscore", {"images": ["a.jpg"], "videos": ["a.mp4"]}, "EMScore scores videos, not images"),
        ("emscore", {}, r"EMScore needs videos, references or both: pass compute\(videos=\[...\]\)"),
        ("emscore", {"videos": ["a.mp4"], "w": 2.5}, "EMScore takes no keyword 'w'; it takes videos, model, .*, "
                                                     "idf, idf_corpus, num_frames"),
    ],
)
def test_what_a_module_takes(name: str, kwargs: dict, message: str, model_dir: str) -> None:
    with pytest.raises(capeval.InputError, match=message):
        load_module(name).compute(predictions=["a cat"], model=model_dir, **kwargs)


def test_videos_are_not_added(videos: List[str]) -> None:
    with pytest.raises(capeval.InputError, match=r"videos are a keyword of compute\(videos=...\)"):
        load_module("emscore").add_batch(predictions=VIDEO_CAPTIONS, videos=videos)


def test_emscore_space_scores_an_uploaded_video(videos: List[str], model_dir: str) -> None:
    app = load_space_app("emscore")
    assert "gradio" not in sys.modules
    assert app.MODELS == [capeval.EMScore.family.default_model, capeval.PACScore.family.default_model]
    result = app.score_caption(videos[0], VIDEO_CAPTIONS[0], "\n".join(VIDEO_REFERENCES[0]), model=model_dir)
    assert result == capeval.EMScore(model=model_dir).score(videos[:1], VIDEO_CAPTIONS[:1], VIDEO_REFERENCES[:1])
    references_alone = app.score_caption(None, VIDEO_CAPTIONS[2], "\n".join(VIDEO_REFERENCES[2]), model=model_dir)
    assert references_alone == capeval.EMScore(model=model_dir).score(None, VIDEO_CAPTIONS[2:], VIDEO_REFERENCES[2:])
    assert Path(app.METRIC_SCRIPT).name == "emscore.py"


def test_emscore_card_maps_every_result_to_the_reference() -> None:
    card = (REPO_ROOT / "metrics" / "emscore" / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(emscore_\w+)` \| `results\['(.+?)'\](\['\w+'\])` \|", card, re.M)
    assert {key: f"{view}{name}" for key, view, name in rows} == dict(EMSCORE_RESULT_KEYS)
    assert len(rows) == len(EMSCORE_RESULT_KEYS) == 21

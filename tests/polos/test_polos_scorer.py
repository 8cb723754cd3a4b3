"""The Polos scorer as users meet it: bad input named by item, captions past the sentence encoder's positions,
the registry entries, the hub folder, ``capeval score`` and the ``evaluate`` module, offline."""
from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import evaluate
import numpy as np
import pytest

import capeval
from capeval.cli import main
from capeval.inputs import InputError
from capeval.models.polos.configuration import PolosConfig
from capeval.originals import SOURCES
from capeval.registry import FAMILIES, MODELS
from conversion.polos_converter import polos_config
from fixtures.paths import REPO_ROOT
from fixtures.polos_checkpoints import ITEMS, parity_images

GOLDENS = json.loads((REPO_ROOT / "tests" / "data" / "polos" / "goldens.json").read_text())


@pytest.fixture(scope="module")
def scorer(polos_dir: Path) -> capeval.Polos:
    return capeval.Polos(model=polos_dir, device="cpu", num_workers=0)


@pytest.mark.parametrize("references, message", [
    (None, "Polos needs references"), ([["a"], []], r"references\[1\] is empty"),
    ([["a"], ["b", ""]], r"references\[1\]\[1\] is empty")])
def test_bad_references_name_the_item(scorer: capeval.Polos, references: object, message: str) -> None:
    with pytest.raises(InputError, match=message):
        scorer.score(parity_images(2), ["a cat", "a dog"], references)


def test_empty_candidate_names_the_item(scorer: capeval.Polos) -> None:
    with pytest.raises(InputError, match=r"candidates\[1\] is empty"):
        scorer.score(parity_images(2), ["a cat", ""], [["a"], ["b"]])


def test_captions_past_the_encoder_positions_are_cut_with_a_warning(scorer: capeval.Polos) -> None:
    """The wheel fails on captions of more than 512 RoBERTa tokens (its position embeddings end there); capeval keeps
    their first 512 tokens and says so, naming them."""
    long = "the cat " * 300
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = scorer.score(parity_images(2), [long, "a dog"], [["a cat"], ["a dog", long]])
    messages = [str(warning.message) for warning in caught if "sentence encoder" in str(warning.message)]
    assert messages == ["2 texts exceed the sentence encoder's 512 tokens and were cut to the first 512 (the "
                        "reference implementation fails on them): candidates[0], references[1][1]"]
    longer = scorer.score(parity_images(1), [long * 2], [["a cat"]])["polos_scores"][0]
    assert result["polos_scores"][0] == pytest.approx(longer, abs=1e-6)  # the same first 512 (and 77) tokens


def test_registry_entries() -> None:
    family = FAMILIES["polos"]
    assert family.scorer_class() is capeval.Polos
    assert family.default_model == "capeval/polos-clip-vit-b-32" and MODELS[family.default_model].revision
    assert family.references == "required" and family.benchmark_metrics["polos"].result_key == "polos_scores"
    source = SOURCES["capeval/polos-clip-vit-b-32"]
    assert source.files[0].url == "https://polos-polaris.s3.ap-northeast-1.amazonaws.com/reprod.zip"
    assert source.files[0].sha256 is None


def test_hub_folder_config_is_the_authors_hparams() -> None:
    """configs/polos-trainer.yaml of keio-smilab24/Polos, as the converter reads it."""
    authors = {"model": "PolosEstimator", "encoder_model": "BERT",
               "pretrained_model": "princeton-nlp/sup-simcse-roberta-base", "layer": "mix", "pool": "cls",
               "hidden_sizes": "2304,1152", "activations": "Tanh", "final_activation": False}
    folder = REPO_ROOT / "hub_models" / "capeval" / "polos-clip-vit-b-32"
    assert PolosConfig.load(folder) == polos_config(authors)


def test_hub_folder_files_are_the_generators_and_the_encoder_is_roberta_base() -> None:
    """The committed config files (the folder's, ``clip/``'s and ``encoder/``'s) equal what
    ``hub_models/generate_configs.py`` writes; the encoder's config is roberta-base's architecture, whose 514
    positions hold the 512 tokens the scorer's warning names."""
    from transformers import AutoConfig

    from hub_models.generate_configs import check

    assert check("capeval/polos-clip-vit-b-32") == []
    encoder = AutoConfig.from_pretrained(REPO_ROOT / "hub_models" / "capeval" / "polos-clip-vit-b-32" / "encoder")
    assert (encoder.model_type, encoder.architectures) == ("roberta", ["RobertaModel"])
    assert (encoder.vocab_size, encoder.hidden_size, encoder.num_hidden_layers, encoder.num_attention_heads,
            encoder.intermediate_size, encoder.max_position_embeddings, encoder.type_vocab_size,
            encoder.layer_norm_eps, encoder.pad_token_id) == (50265, 768, 12, 12, 3072, 514, 1, 1e-5, 1)


def test_capeval_score_command(polos_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The command scores as the scorer does, and records the signature of the API, where its model folder is given
    relative to the working directory and the API's is absolute."""
    images = tmp_path / "images"
    images.mkdir()
    for index, image in enumerate(parity_images(3)):
        image.save(images / f"{index}.png")
    (tmp_path / "candidates.json").write_text(json.dumps({str(i): ITEMS[i][0] for i in range(3)}))
    (tmp_path / "references.json").write_text(json.dumps({str(i): ITEMS[i][1] for i in range(3)}))
    output = tmp_path / "scores.json"
    monkeypatch.chdir(polos_dir.parent)
    code = main(["score", "--metric", "polos", "--model", polos_dir.name, "--images", str(images), "--candidates",
                 str(tmp_path / "candidates.json"), "--references", str(tmp_path / "references.json"),
                 "--device", "cpu", "--output", str(output)])
    assert code == 0
    written = json.loads(output.read_text())
    assert written["signature"] == capeval.Polos(model=polos_dir.resolve(), device="cpu").signature
    assert written["signature"].startswith(f"polos_score|model:{polos_dir.resolve()}|")
    scores = [written["scores"][str(index)]["polos_score"] for index in range(3)]
    np.testing.assert_allclose(scores, GOLDENS["polos_scores"][:3], rtol=0, atol=1e-6)
    assert capsys.readouterr().out.startswith("Polos: ")


def test_without_references_the_command_asks_for_its_flag(polos_dir: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture) -> None:
    """The scorer's error names ``references=`` in Python and ``--references FILE`` on the command line."""
    with pytest.raises(InputError, match=r"^Polos needs references: pass references=\[\[\.\.\.\], \.\.\.\] "):
        capeval.Polos(model=polos_dir, device="cpu").score(parity_images(1), [ITEMS[0][0]])
    images = tmp_path / "images"
    images.mkdir()
    parity_images(1)[0].save(images / "0.png")
    (tmp_path / "candidates.json").write_text(json.dumps({"0": ITEMS[0][0]}))
    assert main(["score", "--metric", "polos", "--model", str(polos_dir), "--images", str(images), "--candidates",
                 str(tmp_path / "candidates.json"), "--device", "cpu"]) == 2
    assert capsys.readouterr().err == ("capeval score: error: Polos needs references: pass --references FILE (the "
                                       "references of each candidate)\n")


def test_readme_polos_example_runs(polos_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    example = re.search(r"```python\n(from capeval import Polos\n.*?)```", readme, re.S).group(1)
    monkeypatch.chdir(REPO_ROOT)
    namespace: dict = {}
    exec(example.replace("Polos()", f"Polos(model={str(polos_dir)!r}, device='cpu')"), namespace)  # noqa: S102
    result = namespace["result"]
    assert len(result["polos_scores"]) == 2 and result["polos_score"] == pytest.approx(np.mean(result["polos_scores"]))


def test_evaluate_module_loads_offline_and_scores_as_the_scorer(polos_dir: Path) -> None:
    module = evaluate.load(str(REPO_ROOT / "metrics" / "polos"))
    assert module.name == "polos"
    result = module.compute(predictions=[candidate for candidate, _ in ITEMS], references=[refs for _, refs in ITEMS],
                            images=parity_images(), model=str(polos_dir), device="cpu")
    np.testing.assert_allclose(result["polos_scores"], GOLDENS["polos_scores"], rtol=0, atol=1e-6)

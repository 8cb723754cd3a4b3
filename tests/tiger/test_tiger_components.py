"""TIGEr building blocks: SCAN tokenisation, checkpoint conversion refusals, and the results defined where the
original code raises."""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest

from capeval import ModelNotAvailableError
from capeval.functional import tigerscore as F
from capeval.models.scan.tokenization import ScanTokenizer, punkt_parameters
from conversion import convert_scan, scan_converter
from fixtures.tiger_checkpoints import (SPECIALS, TRAINING_OPTIONS, save_original_checkpoint, synthetic_state,
                                        write_original_vocab)

WORDS = SPECIALS + ["a", "dog", "cat", ".", "café", "dr.", "smith", "'s", ","]
DIMS = {"vocab_size": len(WORDS), "word_dim": 4, "embed_size": 6, "img_dim": 5}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> ScanTokenizer:
    folder = tmp_path_factory.mktemp("punkt") / "english"
    folder.mkdir()
    (folder / "abbrev_types.txt").write_text("dr\n")
    for name in ("collocations.tab", "sent_starters.txt", "ortho_context.tab"):
        (folder / name).write_text("")
    return ScanTokenizer({w: i for i, w in enumerate(WORDS)}, punkt_parameters(folder))


def test_tokenisation_is_python2_lower_then_word_tokenize(tokenizer: ScanTokenizer) -> None:
    assert tokenizer.tokenize("A DOG. a CAFÉ") == ["a", "dog", ".", "a", "cafÉ"]
    assert tokenizer.tokenize("Dr. Smith's dog, a cat.") == ["dr.", "smith", "'s", "dog", ",", "a", "cat", "."]
    assert tokenizer.tokenize("a dog.a cat") == ["a", "dog.a", "cat"]
    ids = {w: i for i, w in enumerate(WORDS)}
    assert tokenizer.encode("A café CAFÉ zebra") == [ids["<start>"], ids["a"], ids["café"], ids["<unk>"],
                                                     ids["<unk>"], ids["<end>"]]
    assert tokenizer.encode("dog") == [ids["<start>"], ids["dog"], ids["<end>"]]


def test_missing_punkt_offline_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import nltk

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    with pytest.raises(ModelNotAvailableError, match="punkt_tab") as error:
        punkt_parameters()
    assert "nltk.downloader punkt_tab" in str(error.value) and "HF_HUB_OFFLINE" in str(error.value)


def _checkpoint(tmp_path: Path, **overrides) -> tuple[Path, Path]:
    image_state, text_state = synthetic_state(DIMS["vocab_size"], DIMS["word_dim"], DIMS["embed_size"],
                                              DIMS["img_dim"], seed=3)
    extra = overrides.pop("extra", None)
    text_state.update(overrides.pop("text_state", {}))
    for key in overrides.pop("drop", ()):
        text_state.pop(key)
    options = dict(TRAINING_OPTIONS, **{k: DIMS[k] for k in ("word_dim", "embed_size", "img_dim")}, **overrides)
    checkpoint = save_original_checkpoint(tmp_path / "model_best.pth", image_state, text_state, options, extra)
    return checkpoint, write_original_vocab(WORDS, tmp_path / "vocab.json")


def test_conversion_writes_original_weights_unchanged(tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    checkpoint, vocab = _checkpoint(tmp_path)
    scan_converter.convert(checkpoint, vocab, tmp_path / "out")
    weights = load_file(str(tmp_path / "out" / "model.safetensors"))
    image_state, text_state = synthetic_state(DIMS["vocab_size"], DIMS["word_dim"], DIMS["embed_size"],
                                              DIMS["img_dim"], seed=3)
    expected = {**{f"img_enc.{k}": v for k, v in image_state.items()}, **{f"txt_enc.{k}": v for k, v in text_state.items()}}
    assert sorted(weights) == sorted(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(weights[key], value.numpy())


class _Payload:
    """Would create a directory when unpickled, if the unpickler executed it."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.makedirs, (str(self.marker),))


def test_conversion_refuses_other_pickled_objects_without_executing_them(tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    checkpoint, vocab = _checkpoint(tmp_path, extra=_Payload(marker))
    with pytest.raises(scan_converter.CheckpointError, match="refused to load the global .*makedirs"):
        scan_converter.convert(checkpoint, vocab, tmp_path / "out")
    assert not marker.exists()
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("option, value", [("cross_attn", "i2t"), ("agg_func", "Mean"), ("bi_gru", False),
                                           ("raw_feature_norm", "softmax"), ("precomp_enc_type", "weight_norm")])
def test_conversion_refuses_unimplemented_options(tmp_path: Path, option: str, value: object) -> None:
    checkpoint, vocab = _checkpoint(tmp_path, **{option: value})
    with pytest.raises(scan_converter.CheckpointError, match=f"'{option}': {value!r}"):
        scan_converter.convert(checkpoint, vocab, tmp_path / "out")


def test_conversion_lists_missing_and_unexpected_keys(tmp_path: Path) -> None:
    import torch

    checkpoint, vocab = _checkpoint(tmp_path, drop=["rnn.bias_hh_l0_reverse"],
                                    text_state={"rnn.weight_ih_l1": torch.zeros(3)})
    with pytest.raises(scan_converter.CheckpointError) as error:
        scan_converter.convert(checkpoint, vocab, tmp_path / "out")
    assert "missing ['txt_enc.rnn.bias_hh_l0_reverse']" in str(error.value)
    assert "unexpected ['txt_enc.rnn.weight_ih_l1']" in str(error.value)


def test_conversion_refuses_a_vocabulary_of_another_size(tmp_path: Path) -> None:
    checkpoint, _ = _checkpoint(tmp_path)
    vocab = write_original_vocab(WORDS + ["extra"], tmp_path / "bigger.json")
    with pytest.raises(scan_converter.CheckpointError, match="13 rows but .* has 14 words"):
        scan_converter.convert(checkpoint, vocab, tmp_path / "out")


def test_conversion_cli_reports_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "not_a_checkpoint.pth").write_bytes(b"not a pickle")
    code = convert_scan.main(["--checkpoint", str(tmp_path / "not_a_checkpoint.pth"), "--vocab", "v.json",
                              "--out", str(tmp_path / "out")])
    assert code == 1 and "refused or unreadable" in capsys.readouterr().err


def test_constant_reference_grounding_gives_rrs_one() -> None:
    """The original divides by zero in ``ndcg``; every ranking of equally relevant regions is ideal."""
    r = np.array([[0.5, 0.5, 0.5]])
    c = np.array([[0.1, 0.3, 0.2]])
    scores = F.tiger(r, c)
    assert scores.rrs[0] == 1.0
    assert scores.undefined == F.UndefinedCounts(constant_reference_grounding=1)
    p, q = np.full(3, 1 / 3), np.exp(c[0]) / np.exp(c[0]).sum()
    argument = 1.5 * (np.sum(p * np.log(p / q)) + math.log(np.linalg.norm(r) / np.linalg.norm(c)))
    assert scores.wds[0] == pytest.approx(1 - math.exp(argument) / (math.exp(argument) + 1), abs=1e-15)


def test_constant_candidate_grounding_keeps_region_order() -> None:
    """A constant ``c`` ranks no region above another: the stable sort keeps region order."""
    scores = F.tiger(np.array([[0.1, 0.3, 0.2]]), np.array([[0.4, 0.4, 0.4]]))
    relevance = [0.0, 1.0, 0.5]
    ideal = relevance[1] + relevance[2] / math.log2(3) + relevance[0] / 2
    in_region_order = relevance[0] + relevance[1] / math.log2(3) + relevance[2] / 2
    assert scores.rrs[0] == pytest.approx(in_region_order / ideal, abs=1e-15)
    assert scores.undefined == F.UndefinedCounts(constant_candidate_grounding=1)


def test_wds_overflow_gives_zero() -> None:
    """``math.exp(1.5 * x)`` overflows in the original for ``1.5 * x > 709.78``: the limit WDS = 0 is used."""
    scores = F.tiger(np.array([[0.0, -1e150]]), np.array([[0.0, 1e-60]]))
    assert scores.wds[0] == 0.0
    assert scores.undefined == F.UndefinedCounts(wds_overflow=1)
    assert scores.tiger[0] == pytest.approx(0.5 * scores.rrs[0])


def test_ties_in_candidate_grounding_keep_the_lower_region_first() -> None:
    relevance_first = F.tiger(np.array([[0.0, 1.0, 0.5]]), np.array([[0.2, 0.9, 0.9]])).rrs[0]
    relevance_swapped = F.tiger(np.array([[0.0, 0.5, 1.0]]), np.array([[0.2, 0.9, 0.9]])).rrs[0]
    assert relevance_first == 1.0
    ideal = 1.0 + 0.5 / math.log2(3)
    assert relevance_swapped == pytest.approx((0.5 + 1.0 / math.log2(3)) / ideal, abs=1e-15)

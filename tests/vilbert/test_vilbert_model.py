"""ViLBERT port and ViLBERTScore matching against goldens of the original code (tests/data/vilbert/NOTE.md)."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
import torch

from capeval.functional.vilbertscore import average_over_references, greedy_match, window_weights
from capeval.models.regions import RegionFeatures
from capeval.models.vilbert import LoadedVilbert, VilbertConfig, load_vilbert_folder, region_inputs
from conversion.vilbert_converter import CheckpointError, convert
from fixtures.vilbert_checkpoints import DATA, convert_checkpoint, load_regions, unpack_checkpoint

TASK_RETRIEVAL_COCO = 7
STATE_ITEMS = (4, 5, 6)  # items whose token states the goldens hold


@pytest.fixture(scope="module")
def regions() -> List[RegionFeatures]:
    return [region.validated(i, needs_boxes=True) for i, region in enumerate(load_regions())]


@pytest.fixture(scope="module")
def multi_task_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return unpack_checkpoint(tmp_path_factory.mktemp("vilbert_original"))


@pytest.fixture(scope="module")
def converted(multi_task_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return convert_checkpoint(multi_task_checkpoint, tmp_path_factory.mktemp("vilbert_converted"))


@pytest.fixture(scope="module")
def vilbert(converted: Path) -> LoadedVilbert:
    return load_vilbert_folder(converted, torch.device("cpu"), torch.float32)


def text_states(vilbert: LoadedVilbert, texts: List[str], regions: RegionFeatures) -> np.ndarray:
    ids, mask, _ = vilbert.tokenizer.encode(texts)
    features, locations = region_inputs(regions)
    n = len(texts)
    task = torch.full((n, 1), TASK_RETRIEVAL_COCO) if vilbert.model.config.task_specific_tokens else None
    with torch.no_grad():
        return vilbert.model(torch.from_numpy(ids), torch.from_numpy(mask), features.expand(n, -1, -1),
                             locations.expand(n, -1, -1), task_ids=task)[-1].numpy()


def test_tokenizer_matches_original_ids(vilbert: LoadedVilbert, items: List[dict], goldens: Dict[str, np.ndarray]):
    for index, item in enumerate(items):
        ids, mask, _ = vilbert.tokenizer.encode([item["candidate"]] + item["references"])
        np.testing.assert_array_equal(ids, goldens["token_ids"][index], err_msg=f"item {index}")
        np.testing.assert_array_equal(mask, goldens["input_mask"][index], err_msg=f"item {index}")


def test_tokenizer_quirks(vilbert: LoadedVilbert):
    tokenizer = vilbert.tokenizer
    vocab = (DATA / "vocab.txt").read_text(encoding="utf-8").split("\n")
    pieces = [[vocab[i] for i in ids] for ids in tokenizer.wordpiece_ids(["a man [SEP] riding", "café crème",
                                                                         "a dog \U0001F436", ""])]
    assert pieces[0] == ["a", "man", "[", "sep", "]", "riding"]  # lower-cased before WordPiece: not a special token
    assert pieces[1] == ["cafe", "creme"]  # accents stripped
    assert pieces[2] == ["a", "dog", "[UNK]"]
    assert pieces[3] == []
    long_caption = " ".join(["dog"] * 40)
    ids, mask, truncated = tokenizer.encode([long_caption])
    assert mask.sum() == 37 and ids[0, 0] == tokenizer.cls_id and ids[0, -1] != tokenizer.sep_id  # [SEP] cut
    assert truncated.tolist() == [True] and not tokenizer.encode([" ".join(["dog"] * 35)]).truncated[0]


def test_conversion_keeps_trunk_and_drops_heads(converted: Path, multi_task_checkpoint: Path):
    from safetensors import safe_open

    with safe_open(str(converted / "model.safetensors"), "pt") as handle:
        keys = set(handle.keys())
    original = torch.load(multi_task_checkpoint, weights_only=True)
    assert "embeddings.task_embeddings.weight" in keys
    assert not any(key.startswith(("cls.", "vil_")) or "pooler" in key or "q_dense" in key for key in keys)
    assert "encoder.layer.5.output.dense.weight" not in keys  # after the last co-attention block (t id 5)
    assert "encoder.v_layer.3.output.dense.weight" not in keys  # after the last co-attention block (v id 3)
    assert {"bert." + key for key in keys} <= set(original)
    assert VilbertConfig.load(converted).task_specific_tokens


def test_conversion_refuses_unexpected_and_missing_keys(multi_task_checkpoint: Path, tmp_path: Path):
    state = torch.load(multi_task_checkpoint, weights_only=True)
    torch.save(dict(state, **{"bert.encoder.extra.weight": torch.zeros(2)}), tmp_path / "extra.bin")
    with pytest.raises(CheckpointError, match="unexpected keys.*bert.encoder.extra.weight"):
        convert(tmp_path / "extra.bin", DATA / "config.json", DATA / "vocab.txt", tmp_path / "out1")
    del state["bert.encoder.c_layer.2.biattention.key2.weight"]
    torch.save(state, tmp_path / "missing.bin")
    with pytest.raises(CheckpointError, match="missing weights.*c_layer.2.biattention.key2.weight"):
        convert(tmp_path / "missing.bin", DATA / "config.json", DATA / "vocab.txt", tmp_path / "out2")


def test_conversion_reads_old_layer_norm_names(multi_task_checkpoint: Path, tmp_path: Path, vilbert: LoadedVilbert):
    state = torch.load(multi_task_checkpoint, weights_only=True)
    renamed = {("module." + key).replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias",
                                                                                          "LayerNorm.beta"): value
               for key, value in state.items()}
    torch.save(renamed, tmp_path / "old.bin")
    convert(tmp_path / "old.bin", DATA / "config.json", DATA / "vocab.txt", tmp_path / "out")
    reloaded = load_vilbert_folder(tmp_path / "out", torch.device("cpu"), torch.float32)
    for name, value in vilbert.model.state_dict().items():
        assert torch.equal(reloaded.model.state_dict()[name], value), name


def test_text_states_match_original(vilbert: LoadedVilbert, items: List[dict], regions: List[RegionFeatures],
                                    goldens: Dict[str, np.ndarray]):
    for row, index in enumerate(STATE_ITEMS):
        states = text_states(vilbert, [items[index]["candidate"]] + items[index]["references"], regions[index])
        assert states.shape == goldens["text_states"][row].shape == (6, 38, 32)
        np.testing.assert_allclose(states, goldens["text_states"][row], rtol=0, atol=1e-5)


def test_pretrained_layout_without_task_token(multi_task_checkpoint: Path, tmp_path: Path, items: List[dict],
                                              regions: List[RegionFeatures], goldens: Dict[str, np.ndarray]):
    state = torch.load(multi_task_checkpoint, weights_only=True)
    pretrained = {key: value for key, value in state.items()
                  if key.startswith(("bert.", "cls.")) and key != "bert.embeddings.task_embeddings.weight"}
    torch.save(pretrained, tmp_path / "pretrained_model.bin")
    config = convert(tmp_path / "pretrained_model.bin", DATA / "config.json", DATA / "vocab.txt", tmp_path / "out")
    assert not config.task_specific_tokens
    loaded = load_vilbert_folder(tmp_path / "out", torch.device("cpu"), torch.float32)
    states = text_states(loaded, [items[5]["candidate"]] + items[5]["references"], regions[5])
    np.testing.assert_allclose(states, goldens["pretrained_text_states"][0], rtol=0, atol=1e-5)


def test_scores_match_original(vilbert: LoadedVilbert, items: List[dict], regions: List[RegionFeatures],
                               goldens: Dict[str, np.ndarray]):
    per_pair = []
    for index, item in enumerate(items):
        states = text_states(vilbert, [item["candidate"]] + item["references"], regions[index])
        _, mask, _ = vilbert.tokenizer.encode([item["candidate"]] + item["references"])
        weights = window_weights(mask, has_task_token=True)
        k = len(item["references"])
        per_pair.append(greedy_match(np.repeat(states[:1], k, 0), states[1:], np.repeat(weights[:1], k, 0),
                                     weights[1:]))
    for column, name in enumerate(("precision", "recall", "f1")):
        values = np.stack([pair[column] for pair in per_pair])
        np.testing.assert_allclose(values, goldens[name], rtol=0, atol=1e-6, err_msg=name)
        averaged = average_over_references(values.reshape(-1), [5] * len(items))
        np.testing.assert_allclose(averaged, goldens["averaged"][column], rtol=0, atol=1e-6, err_msg=name)


def test_window_weights_follow_the_shifted_mask():
    mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
    # with a task token: window = embedding positions 1..5 = task, w1, w2, [SEP] / w3, ...; weight = mask[j + 1]
    np.testing.assert_array_equal(window_weights(mask, True), [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    np.testing.assert_array_equal(window_weights(mask, False), [[1, 1, 0, 0], [1, 1, 1, 1]])


def test_masked_zeros_enter_the_maxima_only_with_padding():
    # two tokens in the window whose similarities with the other side are all negative
    candidate = np.array([[[1.0, 0], [1, 0], [-1, 0], [1, 0]]], dtype=np.float32)
    reference = np.array([[[1.0, 0], [-1, 0], [-1, 0], [1, 0]]], dtype=np.float32)
    padded = greedy_match(candidate, reference, np.array([[1, 1]]), np.array([[1, 0]]))
    full = greedy_match(candidate, reference, np.array([[1, 1]]), np.array([[1, 1]]))
    # window: candidate rows 1..2 = (1,0), (-1,0); reference cols 1..2 = (-1,0), (-1,0)
    assert padded[0][0] == pytest.approx((0.0 + 1.0) / 2)  # row 1: max(-1, masked 0) = 0; row 2: max(1, 0) = 1
    assert full[0][0] == pytest.approx((-1.0 + 1.0) / 2)  # no padding: row 1 max is -1
    zero_sum = greedy_match(candidate, -candidate, np.array([[1, 0]]), np.array([[1, 0]]))
    assert zero_sum[0][0] == 0 and zero_sum[1][0] == 0 and zero_sum[2][0] == 0  # 0/0 harmonic mean defined as 0

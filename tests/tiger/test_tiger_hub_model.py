"""hub_models/capeval/tiger-scan-coco: the config the converter writes for the published checkpoint, the vocabulary,
and the card's numbers against the TIGEr paper."""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest
from huggingface_hub.repocard_data import model_index_to_eval_results

from capeval.models.scan.configuration import ScanConfig
from capeval.models.scan.tokenization import read_vocab
from conversion.scan_converter import config_from_options
from conversion.publish import read_front_matter
from fixtures.paths import REPO_ROOT
from fixtures.tiger_checkpoints import SPECIALS, TRAINING_OPTIONS

FOLDER = REPO_ROOT / "hub_models" / "capeval" / "tiger-scan-coco"
VOCAB_SIZE = 11353


def test_config_is_what_the_converter_writes_for_the_published_options() -> None:
    written = json.loads((FOLDER / "config.json").read_text())
    converted = config_from_options(argparse.Namespace(**TRAINING_OPTIONS), VOCAB_SIZE)
    assert written == converted.to_dict()
    assert ScanConfig.load(FOLDER) == converted
    assert (converted.word_dim, converted.embed_size, converted.img_dim, converted.lambda_softmax) == (300, 1024, 2048, 9.0)


def test_vocabulary() -> None:
    vocab = read_vocab(FOLDER / "vocab.json")
    assert len(vocab) == VOCAB_SIZE
    assert [vocab[token] for token in SPECIALS] == [0, 1, 2, 3]
    assert all(word == word.lower() and word.isascii() for word in vocab)


def paper_rows(papers: Path) -> dict[str, list[float]]:
    """Label -> numbers of the rows of the TIGEr paper's Tables 1 and 2 that the card cites."""
    rows = {}
    for line in (papers / "tiger-jiang2019.txt").read_text(encoding="utf-8").splitlines():
        match = re.fullmatch(r"(RRS|WDS|TIGEr|TIGEr \(ours\)) ((?:\d+\.\d+ ?)+)", line.strip())
        if match:
            rows[match.group(1)] = [float(value) for value in match.group(2).split()]
    return rows


def test_card(capeval_test_papers: Path) -> None:
    metadata = read_front_matter(FOLDER / "README.md")
    assert metadata["license"] == "other" and metadata["license_name"] and metadata["license_link"]
    assert metadata["library_name"] == "capeval" and {"tiger", "scan", "capeval"} <= set(metadata["tags"])
    name, results = model_index_to_eval_results(metadata["model-index"])
    assert name == "tiger-scan-coco"
    found = {(result.dataset_name, result.metric_name): result.metric_value for result in results}
    rows = paper_rows(capeval_test_papers)
    expected = {}
    for column, (dataset, statistic) in enumerate([("Composite", "Kendall tau"), ("Composite", "Spearman rho"),
                                                   ("Flickr8k-Expert", "Kendall tau"),
                                                   ("Flickr8k-Expert", "Spearman rho")]):
        for label in ("TIGEr", "RRS", "WDS"):
            expected[(dataset, f"{label} {statistic}")] = rows[label][column]
    for column, group in enumerate(["HC", "HI", "HM", "MM", "All"]):
        expected[("PASCAL-50S", f"TIGEr accuracy {group}")] = rows["TIGEr (ours)"][column]
    assert found == pytest.approx(expected)

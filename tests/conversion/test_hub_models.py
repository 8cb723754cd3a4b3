"""Checks of hub_models/: model cards (front matter, paper numbers) and config files (transformers, conversion code)."""
from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import NamedTuple

import clip
import clip.model
import open_clip
import pytest
import yaml
import torch
from huggingface_hub.repocard_data import model_index_to_eval_results
from transformers import AutoTokenizer, CLIPConfig, CLIPImageProcessor

from conversion.clip_converter import clip_config_from_state_dict, load_original_state_dict
from conversion.publish import ORIGINAL_SHA256_PATTERN, read_front_matter
from capeval.configuration import WEIGHTS_NAME
from capeval.hub import CHECKSUMS_NAME
from capeval.originals import SOURCES
from hub_models.generate_configs import HUB_MODELS, card_models, card_with_originals, check, write_metadata
from fixtures.clip_checkpoints import TinyClip
from fixtures.paths import REPO_ROOT

HUB_MODELS_DIR = REPO_ROOT / "hub_models"
B32 = "capeval/pacs-clip-vit-b-32"
L14 = "capeval/pacs-openclip-vit-l-14"
BPP32 = "capeval/pacspp-clip-vit-b-32"
LPP14 = "capeval/pacspp-clip-vit-l-14"
REQUIRED_FIELDS = ("license", "library_name", "tags", "base_model", "model-index")
# Keys a config written by save_pretrained has and a freshly built CLIPConfig lacks or sets differently.
SAVE_ONLY_KEYS = ("transformers_version", "dtype", "architectures")


class PaperCell(NamedTuple):
    """A number in the PAC-S paper: table, row group (Table 8 only), row label, columns after the label cell."""

    table: int
    group: str | None
    label: str
    offset: int


# Every number a card's model-index holds, keyed by (dataset name, metric name), and where the paper prints it.
# Table 1: Flickr8k-Expert tau-b, tau-c, Flickr8k-CF tau-b, tau-c. Table 2: Composite tau-b, tau-c.
# Table 4: PASCAL-50S HC, HI, HM, MM, Mean. Table 5: Abstract-50S mean ("PAC-S 69.7 RefPAC-S 76.9" on one line).
# Table 6: FOIL 1 ref, FOIL 4 refs, ActivityNet-FOIL. Table 8 (row group "OpenCLIP ViT-L/14"): Flickr8k-Expert
# tau-b, tau-c, Flickr8k-CF tau-b, tau-c, VATEX-EVAL tau-b, rho, Pascal-50S, FOIL, ActivityNet-FOIL.
EXPECTED_RESULTS: dict[str, dict[tuple[str, str], PaperCell]] = {
    B32: {
        ("Flickr8k-Expert", "PAC-S Kendall tau-b"): PaperCell(1, None, "PAC-S", 1),
        ("Flickr8k-Expert", "PAC-S Kendall tau-c"): PaperCell(1, None, "PAC-S", 2),
        ("Flickr8k-Expert", "RefPAC-S Kendall tau-b"): PaperCell(1, None, "RefPAC-S", 1),
        ("Flickr8k-Expert", "RefPAC-S Kendall tau-c"): PaperCell(1, None, "RefPAC-S", 2),
        ("Flickr8k-CF", "PAC-S Kendall tau-b"): PaperCell(1, None, "PAC-S", 3),
        ("Flickr8k-CF", "PAC-S Kendall tau-c"): PaperCell(1, None, "PAC-S", 4),
        ("Flickr8k-CF", "RefPAC-S Kendall tau-b"): PaperCell(1, None, "RefPAC-S", 3),
        ("Flickr8k-CF", "RefPAC-S Kendall tau-c"): PaperCell(1, None, "RefPAC-S", 4),
        ("Composite", "PAC-S Kendall tau-b"): PaperCell(2, None, "PAC-S", 1),
        ("Composite", "PAC-S Kendall tau-c"): PaperCell(2, None, "PAC-S", 2),
        ("Composite", "RefPAC-S Kendall tau-b"): PaperCell(2, None, "RefPAC-S", 1),
        ("Composite", "RefPAC-S Kendall tau-c"): PaperCell(2, None, "RefPAC-S", 2),
        ("PASCAL-50S", "PAC-S accuracy HC"): PaperCell(4, None, "PAC-S", 1),
        ("PASCAL-50S", "PAC-S accuracy HI"): PaperCell(4, None, "PAC-S", 2),
        ("PASCAL-50S", "PAC-S accuracy HM"): PaperCell(4, None, "PAC-S", 3),
        ("PASCAL-50S", "PAC-S accuracy MM"): PaperCell(4, None, "PAC-S", 4),
        ("PASCAL-50S", "PAC-S accuracy mean"): PaperCell(4, None, "PAC-S", 5),
        ("PASCAL-50S", "RefPAC-S accuracy HC"): PaperCell(4, None, "RefPAC-S", 1),
        ("PASCAL-50S", "RefPAC-S accuracy HI"): PaperCell(4, None, "RefPAC-S", 2),
        ("PASCAL-50S", "RefPAC-S accuracy HM"): PaperCell(4, None, "RefPAC-S", 3),
        ("PASCAL-50S", "RefPAC-S accuracy MM"): PaperCell(4, None, "RefPAC-S", 4),
        ("PASCAL-50S", "RefPAC-S accuracy mean"): PaperCell(4, None, "RefPAC-S", 5),
        ("Abstract-50S", "PAC-S accuracy mean"): PaperCell(5, None, "PAC-S", 1),
        ("Abstract-50S", "RefPAC-S accuracy mean"): PaperCell(5, None, "RefPAC-S", 1),
        ("FOIL", "PAC-S accuracy"): PaperCell(6, None, "PAC-S", 1),
        ("FOIL", "RefPAC-S accuracy (1 reference)"): PaperCell(6, None, "RefPAC-S", 1),
        ("FOIL", "RefPAC-S accuracy (4 references)"): PaperCell(6, None, "RefPAC-S", 2),
    },
    L14: {
        ("Flickr8k-Expert", "PAC-S Kendall tau-b"): PaperCell(8, "OpenCLIP ViT-L/14", "PAC-S", 1),
        ("Flickr8k-Expert", "PAC-S Kendall tau-c"): PaperCell(8, "OpenCLIP ViT-L/14", "PAC-S", 2),
        ("Flickr8k-CF", "PAC-S Kendall tau-b"): PaperCell(8, "OpenCLIP ViT-L/14", "PAC-S", 3),
        ("Flickr8k-CF", "PAC-S Kendall tau-c"): PaperCell(8, "OpenCLIP ViT-L/14", "PAC-S", 4),
        ("PASCAL-50S", "PAC-S accuracy mean"): PaperCell(8, "OpenCLIP ViT-L/14", "PAC-S", 7),
        ("FOIL", "PAC-S accuracy"): PaperCell(8, "OpenCLIP ViT-L/14", "PAC-S", 8),
    },
}
# The PAC-S++ cards list no results: the PAC-S++ paper (arXiv 2410.07336) is not among the test papers.
EXPECTED_RESULTS[BPP32] = {}
EXPECTED_RESULTS[LPP14] = {}
BASE_MODELS = {B32: "openai/clip-vit-base-patch32", L14: "laion/CLIP-ViT-L-14-laion2B-s32B-b82K",
               BPP32: "openai/clip-vit-base-patch32", LPP14: "openai/clip-vit-large-patch14"}
OPENAI_NORMALIZED = (B32, BPP32, LPP14)


def model_folders() -> list[str]:
    """Repo ids of every CLIP folder hub_models/<namespace>/<name> (those with a preprocessor_config.json; the
    region detector's folder is checked in tests/regions/test_bottom_up_regions.py)."""
    return sorted(f"{path.parent.name}/{path.name}" for path in HUB_MODELS_DIR.glob("*/*")
                  if path.is_dir() and (path / "preprocessor_config.json").is_file())


@pytest.fixture(scope="module")
def pacscore_paper(capeval_test_papers: Path) -> list[str]:
    """Lines of the PAC-S paper's text (Sarto et al., CVPR 2023)."""
    return (capeval_test_papers / "pacscore-sarto2023.txt").read_text(encoding="utf-8").splitlines()


def paper_table(lines: list[str], number: int) -> list[list[str]]:
    """Rows (tab-separated cells) of Table ``number`` in the paper text: the tabbed lines just above its caption."""
    caption = next(index for index, line in enumerate(lines) if line.startswith(f"Table {number}. "))
    start = caption - 1
    while not lines[start].strip():
        start -= 1
    end = start + 1
    while "\t" in lines[start]:
        start -= 1
    return [line.split("\t") for line in lines[start + 1:end]]


def paper_number(lines: list[str], cell: PaperCell) -> float:
    """The number the paper (text ``lines``) prints at ``cell`` (improvement annotations such as "(+2.8)" dropped)."""
    rows = paper_table(lines, cell.table)
    if cell.group is not None:
        rows = rows[next(index for index, row in enumerate(rows) if row[0] == cell.group):]
    row = next(row for row in rows if cell.label in row)
    text = row[row.index(cell.label) + cell.offset]
    return float(re.match(r"\s*(?:<u>)?(\d+\.\d+)", text).group(1))


def meta_original_state_dict(repo_id: str) -> dict[str, torch.Tensor]:
    """State dict (meta tensors) of the full-size original model each folder was converted from."""
    if repo_id in (B32, BPP32):
        with torch.device("meta"):
            model = clip.model.CLIP(512, 224, 12, 768, 32, 77, 49408, 512, 8, 12)
    elif repo_id == LPP14:
        with torch.device("meta"):
            model = clip.model.CLIP(768, 224, 24, 1024, 14, 77, 49408, 768, 12, 12)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = open_clip.create_model("ViT-L-14", device="meta")
    return model.state_dict()


OTHER_MODELS = {
    "capeval/bridge-clip-vit-b-32": "test_bridge_card_claims_no_results_before_weights_exist below",
    "capeval/bottom-up-frcnn-r101-vg": "tests/regions/test_bottom_up_regions.py",
    "capeval/vilbert-detector-x152-fpn": "tests/regions/test_x152_fpn_regions.py",
    "capeval/tiger-scan-coco": "tests/tiger/test_tiger_hub_model.py",
    "capeval/vilbert-multi-task": "tests/vilbert/test_vilbert_hub_model.py",
    "capeval/polos-clip-vit-b-32": "tests/polos/test_polos_scorer.py",
}
"""The folders that are not CLIP models, and where each is checked."""


def test_every_folder_is_known() -> None:
    assert model_folders() == sorted(EXPECTED_RESULTS)
    assert sorted(EXPECTED_RESULTS) == sorted(HUB_MODELS)
    every_folder = sorted(f"{path.parent.name}/{path.name}" for path in HUB_MODELS_DIR.glob("*/*") if path.is_dir())
    assert every_folder == sorted([*EXPECTED_RESULTS, *OTHER_MODELS])


@pytest.mark.parametrize("model", card_models())
def test_card_lists_exactly_the_originals_the_fetcher_reads(model: str) -> None:
    """Each card's list of original files is the table's (regenerated by generate_configs.py), so the card names
    exactly the file names and URLs that capeval downloads."""
    text = (HUB_MODELS_DIR / model / "README.md").read_text(encoding="utf-8")
    assert text == card_with_originals(model)
    for file in SOURCES[model].files:
        assert f"`{file.name}`" in text and f"{file.url}" in text


def test_every_card_folder_with_originals_has_its_list() -> None:
    folders = sorted(f"{path.parent.name}/{path.name}" for path in HUB_MODELS_DIR.glob("*/*") if path.is_dir())
    assert sorted(card_models()) == sorted(model for model in folders if SOURCES[model].files)
    assert SOURCES["capeval/bridge-clip-vit-b-32"].no_original and not SOURCES["capeval/bridge-clip-vit-b-32"].files


def test_bridge_card_claims_no_results_before_weights_exist() -> None:
    card = (HUB_MODELS_DIR / "capeval" / "bridge-clip-vit-b-32" / "README.md").read_text(encoding="utf-8")
    front_matter = yaml.safe_load(card.split("---")[1])
    assert front_matter["model-index"] == []
    assert not list((HUB_MODELS_DIR / "capeval" / "bridge-clip-vit-b-32").glob("*.safetensors"))


def test_paper_parser_reads_known_numbers(pacscore_paper: list[str]) -> None:
    """Cross-checks of the parser on numbers the paper text also states in prose."""
    assert paper_number(pacscore_paper, PaperCell(1, None, "CLIP-S [17]", 2)) == 51.2  # CLIP-S tau-c (CLIPScore paper)
    assert paper_number(pacscore_paper, PaperCell(4, None, "CLIP-S [17]", 2)) == 99.3  # underlined in the text
    assert paper_number(pacscore_paper, PaperCell(8, "OpenCLIP ViT-L/14", "CLIP-S [17]", 1)) == 54.4
    assert paper_number(pacscore_paper, PaperCell(8, "CLIP ViT-B/16", "PAC-S", 1)) == 54.5


@pytest.mark.parametrize("repo_id", sorted(EXPECTED_RESULTS))
def test_card_front_matter(repo_id: str) -> None:
    metadata = read_front_matter(HUB_MODELS_DIR / repo_id / "README.md")
    assert [field for field in REQUIRED_FIELDS if not metadata.get(field)] == []
    assert metadata["library_name"] == "transformers"
    assert metadata["license"] == "other" and metadata["license_name"] and metadata["license_link"]
    assert isinstance(metadata["tags"], list) and {"pac-s", "capeval"} <= set(metadata["tags"])
    assert metadata["base_model"] == BASE_MODELS[repo_id]
    model_name, eval_results = model_index_to_eval_results(metadata["model-index"])
    assert model_name == repo_id.split("/")[1]
    assert len(eval_results) == len(EXPECTED_RESULTS[repo_id])


@pytest.mark.parametrize("repo_id", sorted(EXPECTED_RESULTS))
def test_card_numbers_are_the_papers(repo_id: str, request: pytest.FixtureRequest) -> None:
    metadata = read_front_matter(HUB_MODELS_DIR / repo_id / "README.md")
    found: dict[tuple[str, str], tuple[float, str]] = {}
    for result in metadata["model-index"][0]["results"]:
        for metric in result["metrics"]:
            found[(result["dataset"]["name"], metric["name"])] = (metric["value"], result["source"]["name"])
    expected = EXPECTED_RESULTS[repo_id]
    assert sorted(found) == sorted(expected)
    for key, cell in expected.items():
        value, source = found[key]
        assert value == paper_number(request.getfixturevalue("pacscore_paper"), cell), key
        assert source.endswith(f"Table {cell.table}"), key


@pytest.mark.parametrize("repo_id", sorted(EXPECTED_RESULTS))
def test_card_has_one_original_sha256_marker(repo_id: str) -> None:
    text = (HUB_MODELS_DIR / repo_id / "README.md").read_text(encoding="utf-8")
    assert len(ORIGINAL_SHA256_PATTERN.findall(text)) == 1


@pytest.mark.parametrize("repo_id", sorted(EXPECTED_RESULTS))
def test_config_equals_conversion_of_meta_original(repo_id: str) -> None:
    folder = HUB_MODELS_DIR / repo_id
    loaded = CLIPConfig.from_pretrained(folder)
    inferred = clip_config_from_state_dict(meta_original_state_dict(repo_id), HUB_MODELS[repo_id].arch)
    assert loaded.architectures == ["CLIPModel"] and loaded.dtype == torch.float32
    loaded_dict, inferred_dict = loaded.to_dict(), inferred.to_dict()
    for key in SAVE_ONLY_KEYS:
        loaded_dict.pop(key, None)
        inferred_dict.pop(key, None)
    assert loaded_dict == inferred_dict


@pytest.mark.parametrize("repo_id", sorted(EXPECTED_RESULTS))
def test_folder_loads_with_transformers(repo_id: str) -> None:
    folder = HUB_MODELS_DIR / repo_id
    processor = CLIPImageProcessor.from_pretrained(folder)
    if repo_id in OPENAI_NORMALIZED:
        normalize = clip.clip._transform(224).transforms[-1]
        expected_mean, expected_std = list(normalize.mean), list(normalize.std)
    else:
        pretrained = open_clip.get_pretrained_cfg("ViT-L-14", "laion2b_s32b_b82k")
        expected_mean, expected_std = list(pretrained["mean"]), list(pretrained["std"])
    assert (list(processor.image_mean), list(processor.image_std)) == (expected_mean, expected_std)
    assert processor.size == {"shortest_edge": 224}
    assert (processor.crop_size["height"], processor.crop_size["width"]) == (224, 224)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    text = "a photo depicts a brown dog running through the tall grass"
    reference = clip.tokenize(text)[0]
    ids = tokenizer(text)["input_ids"]
    assert ids == reference[: len(ids)].tolist() and reference[len(ids):].eq(0).all()


@pytest.mark.parametrize("fixture_name", ["tiny_openai_clip", "tiny_openclip"])
def test_generator_writes_what_conversion_writes(fixture_name: str, request: pytest.FixtureRequest,
                                                 tmp_path: Path) -> None:
    tiny: TinyClip = request.getfixturevalue(fixture_name)
    write_metadata(load_original_state_dict(tiny.checkpoint), tiny.arch, tmp_path)
    converted = sorted(path.name for path in tiny.hf_dir.iterdir() if path.name not in (WEIGHTS_NAME, CHECKSUMS_NAME))
    assert sorted(path.name for path in tmp_path.iterdir()) == converted
    for name in converted:
        assert (tmp_path / name).read_bytes() == (tiny.hf_dir / name).read_bytes(), name


@pytest.mark.parametrize("repo_id", sorted(EXPECTED_RESULTS))
def test_committed_files_equal_regenerated(repo_id: str) -> None:
    assert check(repo_id) == []


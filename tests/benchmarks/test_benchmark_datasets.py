"""Benchmark loaders: published layouts, exact protocols (what is kept, dropped, removed), clear errors.

Fixtures in tests/data/benchmarks are small files in each published layout. flickr8k/*.txt are rows copied from the
Flickr8k release; flickr8k/*.json were produced from those rows by jmhessel/clipscore's own
flickr8k_example/download.py (run outside this repository), so the text and json loaders are checked against the
reference preprocessing itself.
"""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import List

import pytest

from capeval.benchmarks import (
    Benchmark,
    BenchmarkFormatError,
    FoilItem,
    PairwiseItem,
    RatedItem,
    available_benchmarks,
    check_images,
    load_benchmark,
)
from fixtures.paths import TESTS_DATA

DATA = TESTS_DATA / "benchmarks"
FLICKR8K = DATA / "flickr8k"


def _content(benchmark: Benchmark) -> List[tuple]:
    return [(item.image, item.candidate, item.references, item.human) for item in benchmark.items]


def _token_file() -> dict:
    captions = {}
    for line in (FLICKR8K / "Flickr8k.token.txt").read_text().splitlines():
        caption_id, caption = line.split("\t")
        captions[caption_id] = caption
    return captions


def test_available_benchmarks() -> None:
    assert available_benchmarks() == [
        "activitynet-foil", "composite", "flickr8k-cf", "flickr8k-expert", "foil", "nebula", "pascal-50s", "polaris",
        "thumb", "vatex-eval",
    ]


def test_flickr8k_expert_text_protocol() -> None:
    benchmark = load_benchmark("flickr8k-expert", FLICKR8K)
    rows = [line.split("\t") for line in (FLICKR8K / "ExpertAnnotations.txt").read_text().splitlines()]
    captions = _token_file()
    # 2533424347_cf2f84872b.jpg#2 is rated for its own image: its text is a reference, so it is dropped.
    kept = [row for row in rows if row[1] != "2533424347_cf2f84872b.jpg#2"]
    assert len(rows) == 24 and len(benchmark.items) == 3 * len(kept) == 69
    assert benchmark.task == "correlation" and benchmark.primary_statistic == "kendall_tau_c"
    assert benchmark.statistics == ("kendall_tau_c", "kendall_tau_b")
    assert "1 (image, candidate) pairs" in benchmark.protocol
    first = benchmark.items[:3]
    image, caption_id, *ratings = kept[0]
    assert [item.human for item in first] == [float(rating) for rating in ratings]
    assert {item.candidate for item in first} == {captions[caption_id]}
    assert first[0].references == tuple(captions[f"{image}#{k}"] for k in range(5))
    assert [item.key for item in first] == [f"{image}#{caption_id}#{rater}" for rater in (1, 2, 3)]
    assert all(isinstance(item, RatedItem) for item in benchmark.items)
    assert benchmark.images() == [
        "1056338697_4f7d7ce270.jpg",
        "2533424347_cf2f84872b.jpg",
        "3262075846_5695021d84.jpg",
        "3498327617_d2e3db3ee3.jpg",
    ]


def test_flickr8k_cf_one_shared_reference_list_per_image() -> None:
    benchmark = load_benchmark("flickr8k-cf", FLICKR8K)
    assert len(benchmark.items) == 11  # every row kept
    assert benchmark.primary_statistic == "kendall_tau_b"
    by_image = {}
    for item in benchmark.items:
        by_image.setdefault(item.image, set()).add(item.references)
    assert all(len(lists) == 1 for lists in by_image.values())
    rugby = next(iter(by_image["3262075846_5695021d84.jpg"]))
    # This image lists "A group of men are playing rugby ." twice; the judged candidate with that text removes ONE copy.
    assert rugby == (
        "A bunch of men play rugby on a muddy field .",
        "A group of men are playing rugby .",
        "A group of opposing players are in the middle of a rugby game .",
        "Men play rugby .",
    )
    # A candidate written for ANOTHER image whose text equals one of this image's references removes it too.
    dog = next(iter(by_image["3498327617_d2e3db3ee3.jpg"]))
    assert "A dog swimming with a stick in its mouth ." not in dog and len(dog) == 4
    assert [item.human for item in benchmark.items if item.image == "3498327617_d2e3db3ee3.jpg"] == [
        0.0, 0.0, 0.666666666666667, 1.0
    ]


@pytest.mark.parametrize(
    "name, json_file", [("flickr8k-expert", "flickr8k.json"), ("flickr8k-cf", "crowdflower_flickr8k.json")]
)
def test_flickr8k_text_equals_clipscore_json(name: str, json_file: str) -> None:
    from_text = load_benchmark(name, FLICKR8K, source="text")
    from_json = load_benchmark(name, FLICKR8K / json_file)
    assert from_json.source.startswith("json:") and from_text.source.startswith("text:")
    assert _content(from_text) == _content(from_json)
    assert len({item.key for item in from_json.items}) == len(from_json.items)


def test_flickr8k_json_layout_drops_nan_ratings(tmp_path: Path) -> None:
    data = json.loads((FLICKR8K / "crowdflower_flickr8k.json").read_text())
    first = next(iter(data.values()))
    first["human_judgement"][1]["rating"] = float("nan")
    path = tmp_path / "crowdflower_flickr8k.json"
    path.write_text(json.dumps(data))
    benchmark = load_benchmark("flickr8k-cf", path)
    assert len(benchmark.items) == 10 and "1 NaN ratings dropped" in benchmark.protocol


def test_flickr8k_errors_name_the_line(tmp_path: Path) -> None:
    for name in ("Flickr8k.token.txt", "CrowdFlowerAnnotations.txt"):
        (tmp_path / name).write_text((FLICKR8K / name).read_text())
    with open(tmp_path / "CrowdFlowerAnnotations.txt", "a") as handle:
        handle.write("1056338697_4f7d7ce270.jpg\tnot_a_caption.jpg#2\t1\t3\t0\n")
    with pytest.raises(BenchmarkFormatError, match=r"CrowdFlowerAnnotations.txt:12: caption id 'not_a_caption.jpg#2'"):
        load_benchmark("flickr8k-cf", tmp_path)
    (tmp_path / "CrowdFlowerAnnotations.txt").write_text("only\ttwo\n")
    with pytest.raises(BenchmarkFormatError, match="expected 5 tab-separated fields"):
        load_benchmark("flickr8k-cf", tmp_path)
    with pytest.raises(FileNotFoundError, match="ExpertAnnotations.txt"):
        load_benchmark("flickr8k-expert", tmp_path, source="text")
    with pytest.raises(FileNotFoundError, match="needs root="):
        load_benchmark("flickr8k-expert")


def test_flickr8k_full_release_counts(capeval_test_data: Path) -> None:
    expert = load_benchmark("flickr8k-expert", capeval_test_data / "flickr8k")
    crowdflower = load_benchmark("flickr8k-cf", capeval_test_data / "flickr8k")
    assert len(expert.items) == 16992 and "158 (image, candidate) pairs" in expert.protocol
    assert len(crowdflower.items) == 47830 and "723 references removed" in crowdflower.protocol
    assert len(expert.images()) == len(crowdflower.images()) == 1000
    assert all(len(item.references) == 5 for item in expert.items)
    assert {len(item.references) for item in crowdflower.items} == {3, 4, 5}


def test_pascal50s_full_file(capeval_test_data: Path) -> None:
    benchmark = load_benchmark("pascal-50s", capeval_test_data / "pascal50s")
    raw = json.loads((capeval_test_data / "pascal50s" / "pascal_50s.json").read_text())
    assert benchmark.task == "pairwise" and len(benchmark.items) == 4000
    for category in ("HC", "HI", "HM", "MM"):
        items = [item for item in benchmark.items if item.category == category]
        assert [item.label for item in items] == [entry["label"] for entry in raw[category]]
        assert items[0].image == os.path.basename(raw[category][0]["image"])
        assert items[0].candidates == tuple(" ".join(text.split()) for text in raw[category][0]["captions"])
    assert all(len(item.references) == 5 for item in benchmark.items)


def test_pascal50s_layout_and_options(tmp_path: Path) -> None:
    entry = {
        "image": "VOC2012/JPEGImages/2008_000001.jpg",
        "captions": ["A  dog.", "A cat."],
        "label": 1,
        "references": ["r1", "r2", "r3"],
    }
    path = tmp_path / "pascal_50s.json"
    path.write_text(json.dumps({"HI": [entry], "HC": [entry, dict(entry, label=0)]}))
    benchmark = load_benchmark("pascal-50s", path, references=2)
    assert [item.key for item in benchmark.items] == ["HC#0", "HC#1", "HI#0"]
    assert benchmark.items[0] == PairwiseItem(
        image="2008_000001.jpg",
        candidates=("A dog.", "A cat."),
        references=("r1", "r2"),
        label=1,
        category="HC",
        key="HC#0",
    )
    path.write_text(json.dumps({"HC": [dict(entry, label=2)]}))
    with pytest.raises(BenchmarkFormatError, match=r"\['HC'\]\[0\]: 'label' must be 0 or 1"):
        load_benchmark("pascal-50s", path)
    path.write_text(json.dumps({"XX": [entry]}))
    with pytest.raises(BenchmarkFormatError, match="categories"):
        load_benchmark("pascal-50s", path)


def test_check_images(tmp_path: Path) -> None:
    benchmark = load_benchmark("flickr8k-expert", FLICKR8K)
    for name in benchmark.images()[:2]:
        (tmp_path / name).write_bytes(b"jpeg")
    missing = r"2 of the 4 images .*: 3262075846_5695021d84.jpg, 3498327617_d2e3db3ee3.jpg$"
    with pytest.raises(FileNotFoundError, match=missing):
        check_images(benchmark, tmp_path)
    for name in benchmark.images()[2:]:
        (tmp_path / name).write_bytes(b"jpeg")
    check_images(benchmark, tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        check_images(benchmark, tmp_path / "nowhere")


def test_check_images_lists_first_few(tmp_path: Path) -> None:
    benchmark = Benchmark(
        name="many", task="correlation", protocol="", primary_statistic="kendall_tau_c",
        items=tuple(RatedItem(f"{index}.jpg", "c", ("r",), 1.0, str(index)) for index in range(8)),
    )
    with pytest.raises(FileNotFoundError, match=r"8 of the 8 images .*: 0.jpg, 1.jpg, 2.jpg, 3.jpg, 4.jpg, \.\.\.$"):
        check_images(benchmark, tmp_path)


def test_unknown_names_and_options() -> None:
    with pytest.raises(ValueError, match="unknown benchmark 'flickr30k'"):
        load_benchmark("flickr30k", FLICKR8K)
    with pytest.raises(TypeError, match=r"does not take option\(s\) split"):
        load_benchmark("flickr8k-expert", FLICKR8K, split="test")
    with pytest.raises(ValueError, match="source must be"):
        load_benchmark("flickr8k-expert", FLICKR8K, source="hub")


# ---------------------------------------------------------------------------------------------------------------
# Published layouts of the benchmarks without data here (fixture files written in each layout)


def test_thumb_jsonl() -> None:
    benchmark = load_benchmark("thumb", DATA / "thumb")
    rows = [json.loads(line) for line in (DATA / "thumb" / "mscoco_THumB-1.0.jsonl").read_text().splitlines()]
    assert len(benchmark.items) == len(rows) == 10
    assert [item.human for item in benchmark.items] == [row["human_score"] for row in rows]
    assert benchmark.items[4].key == "974#Human" and benchmark.items[4].image == "COCO_val2014_000000000974.jpg"
    assert len(benchmark.items[0].references) == 5 and benchmark.primary_statistic == "pearson"
    without_human = load_benchmark("thumb", DATA / "thumb", include_human=False)
    assert len(without_human.items) == 8 and all(not item.key.endswith("#Human") for item in without_human.items)


def test_foil_pairs_and_references() -> None:
    four = load_benchmark("foil", DATA / "foil")
    one = load_benchmark("foil", DATA / "foil", references=1)
    assert four.task == "foil" and len(four.items) == 6  # 3 foils -> 3 (original, foil) pairs
    pairs = {}
    for item in four.items:
        pairs.setdefault(item.pair, []).append(item)
    assert all(sorted(item.is_foil for item in pair) == [False, True] for pair in pairs.values())
    original = four.items[0]
    assert isinstance(original, FoilItem) and not original.is_foil
    assert original.candidate == "A man riding a wave on top of a surfboard."
    # References: the image's COCO captions other than the original caption, the first 4 (or 1).
    assert original.references == ("A surfer rides a large wave.", "A person surfing on a big wave.",
                                   "Surfer on a white board riding a wave.", "A surfer in a wetsuit catching a wave.")
    assert one.items[0].references == ("A surfer rides a large wave.",)
    assert [item.image for item in four.items][:2] == ["COCO_val2014_000000000074.jpg"] * 2
    with pytest.raises(ValueError, match="references=2, but it must be 1 or 4"):
        load_benchmark("foil", DATA / "foil", references=2)


def test_polaris_csv_and_parquet(tmp_path: Path) -> None:
    from_csv = load_benchmark("polaris", DATA / "polaris")
    assert from_csv.source.startswith("csv:") and len(from_csv.items) == 3
    assert from_csv.items[0] == RatedItem(
        image="0001.jpg", candidate="a dog runs on the grass", references=("A dog running.", "A brown dog on grass."),
        human=0.75, key="0001.jpg#0",
    )
    assert from_csv.image_dir == str(DATA / "polaris" / "images")
    parquet = _write_hub_parquet(tmp_path / "data" / "test-00000-of-00001.parquet", {
        "refs": [["A dog running.", "A brown dog on grass."]],
        "cand": ["a dog runs on the grass"],
        "img": [{"bytes": b"\xff\xd8fake-jpeg", "path": "0001.jpg"}],
        "human_score": [0.75],
    })
    assert parquet.is_file()
    images = tmp_path / "images"
    from_parquet = load_benchmark("polaris", tmp_path, source="parquet", image_dir=images)
    assert _content(from_parquet) == _content(from_csv)[:1]
    assert (images / "0001.jpg").read_bytes() == b"\xff\xd8fake-jpeg" and from_parquet.image_dir == str(images)
    check_images(from_parquet)


def test_nebula_parquet_names_images_by_file_name(tmp_path: Path) -> None:
    _write_hub_parquet(tmp_path / "test-00000-of-00001.parquet", {
        "file_name": ["nebula_17.jpg", "nebula_18.jpg"],
        "image": [{"bytes": b"one", "path": None}, {"bytes": b"two", "path": None}],
        "refs": [["r1", "r2"], ["r3"]],
        "mt": ["a  caption", "another caption"],
        "human_score": [0.5, 1.0],
    })
    benchmark = load_benchmark("nebula", tmp_path, image_dir=tmp_path / "images")
    assert [item.image for item in benchmark.items] == ["nebula_17.jpg", "nebula_18.jpg"]
    assert benchmark.items[0].candidate == "a caption" and benchmark.items[1].references == ("r3",)
    assert (tmp_path / "images" / "nebula_18.jpg").read_bytes() == b"two"


def test_hub_images_with_clashing_names_keep_their_own_bytes(tmp_path: Path) -> None:
    _write_hub_parquet(tmp_path / "test-00000-of-00001.parquet", {
        "refs": [["r"], ["r"], ["r"]],
        "cand": ["first", "second", "third"],
        "img": [{"bytes": b"one", "path": "image.jpg"}, {"bytes": b"two", "path": "image.jpg"},
                {"bytes": b"one", "path": "image.jpg"}],
        "human_score": [1.0, 2.0, 3.0],
    })
    images = tmp_path / "images"
    benchmark = load_benchmark("polaris", tmp_path, image_dir=images)
    names = [item.image for item in benchmark.items]
    assert names[0] == names[2] == "image.jpg" and names[1] != "image.jpg"
    assert [(images / name).read_bytes() for name in names] == [b"one", b"two", b"one"]
    assert load_benchmark("polaris", tmp_path, image_dir=images).images() == benchmark.images()


def test_nebula_csv_layout() -> None:
    benchmark = load_benchmark("nebula", DATA / "nebula")
    assert [item.human for item in benchmark.items] == [0.875, 0.25]
    assert benchmark.items[1].references == ("Two people walk on a beach.", "A couple walking along the shore.")


def test_hub_source_offline_says_how_to_get_the_data(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConnectionError, match="yuwd/Polaris.*polaris_<split>.csv"):
        load_benchmark("polaris", source="hub")
    with pytest.raises(ConnectionError, match="Ka2ukiMatsuda/Nebula"):
        load_benchmark("nebula", source="hub", split="validation")


def test_composite_amt_files() -> None:
    benchmark = load_benchmark("composite", DATA / "composite")
    assert benchmark.source.startswith("amt:")
    # 8k: 1 HIT x 3 candidates, 30k: 1 HIT x 4, coco: 1 HIT x 4; the 2 trailing summary rows of each file are skipped.
    assert len(benchmark.items) == 11 and "6 rows without a complete HIT skipped" in benchmark.protocol
    flickr8k = [item for item in benchmark.items if item.key.startswith("8k#")]
    assert [item.human for item in flickr8k] == [4.0, 2.0, 5.0]
    # The rated human caption was drawn from the references: it is removed from its own reference list.
    rated_reference = flickr8k[2]
    assert rated_reference.candidate == "A dog running through snow ."
    assert rated_reference.candidate not in rated_reference.references and len(rated_reference.references) == 4
    assert len(flickr8k[0].references) == 5
    coco = [item for item in benchmark.items if item.key.startswith("coco#")]
    assert coco[0].image == "COCO_val2014_000000000074.jpg" and len(coco[0].references) == 5
    only_coco = load_benchmark("composite", DATA / "composite", subsets=["coco"])
    assert len(only_coco.items) == 4



def test_composite_drop_first_reference_is_tigers_protocol(tmp_path: Path) -> None:
    """TIGEr drops the first reference (file order) for the human candidate Input.text1, whatever it says, and
    keeps every reference for machine candidates, even one equal to the candidate."""
    benchmark = load_benchmark("composite", DATA / "composite", drop_first_reference=True)
    default = load_benchmark("composite", DATA / "composite")
    token_rows = (DATA / "composite" / "Flickr8k.token.txt").read_text().splitlines()
    flickr8k_references = [row.split("\t", 1)[1] for row in token_rows]
    human, first_machine, second_machine = [item for item in benchmark.items if item.key.startswith("8k#")]
    assert human.key.endswith("#1") and human.references == tuple(flickr8k_references[1:])
    assert first_machine.references == tuple(flickr8k_references)
    # the machine caption equal to reference #2 keeps it (the default removes it)
    assert second_machine.candidate == flickr8k_references[2] and second_machine.references == tuple(flickr8k_references)
    assert second_machine.candidate not in [item for item in default.items if item.key == second_machine.key][0].references
    # the COCO human caption is the image's last reference: TIGEr drops the first one and keeps the candidate
    coco_references = [annotation["caption"] for annotation in
                       json.loads((DATA / "composite" / "captions_val2014.json").read_text())["annotations"]]
    human_coco = [item for item in benchmark.items if item.key.startswith("coco#")][0]
    assert human_coco.key.endswith("#1") and human_coco.references == tuple(coco_references[1:])
    assert human_coco.candidate == coco_references[-1]
    assert "all but the first in file order" in benchmark.protocol and "(3 removed)" in benchmark.protocol
    assert [item.human for item in benchmark.items] == [item.human for item in default.items]
    # an image with a single reference keeps it for its human candidate, with a warning
    for name in ("8k_correctness.csv", "Flickr8k.token.txt"):
        (tmp_path / name).write_text((DATA / "composite" / name).read_text())
    (tmp_path / "Flickr8k.token.txt").write_text(token_rows[0] + "\n")
    with pytest.warns(UserWarning, match="kept the only reference of 1 human candidate"):
        single = load_benchmark("composite", tmp_path, subsets=["8k"], drop_first_reference=True)
    assert all(item.references == (flickr8k_references[0],) for item in single.items)
    with pytest.raises(ValueError, match="drop_first_reference needs the AMT correctness files"):
        load_benchmark("composite", tmp_path, source="csv", drop_first_reference=True)


def test_composite_polos_csv(tmp_path: Path) -> None:
    path = tmp_path / "en_test_composite_da.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["imgid", "mt", "refs", "score"])
        writer.writerow(["1000268201_693b08cb0e.jpg", "a girl", str(["A child.", "A girl going into a building."]), 3])
    benchmark = load_benchmark("composite", tmp_path)
    assert benchmark.source.startswith("csv:") and benchmark.items[0].human == 3.0
    with open(path, "a", newline="") as handle:
        csv.writer(handle).writerow(["x.jpg", "c", "__import__('os')", 1])
    with pytest.raises(BenchmarkFormatError, match="row 1: 'refs' is not a list literal"):
        load_benchmark("composite", tmp_path)


def _write_hub_parquet(path: Path, columns: dict) -> Path:
    """A parquet file as the hub stores a dataset: image columns typed ``datasets.Image`` ({bytes, path} structs)."""
    import datasets

    features = datasets.Features(
        {
            name: datasets.Image() if name in ("img", "image")
            else datasets.Sequence(datasets.Value("string")) if name == "refs"
            else datasets.Value("float32" if name == "human_score" else "string")
            for name in columns
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_dict(columns, features=features).to_parquet(str(path))
    return path

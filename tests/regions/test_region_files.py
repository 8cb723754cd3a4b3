"""Precomputed region-feature files: ``.npz`` keyed by image id and bottom-up-attention ``.tsv``."""
from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pytest

from capeval import InputError
from capeval.models.regions.files import read_region_features


def test_npz_plain_and_structured(tmp_path: Path) -> None:
    features = np.arange(12, dtype=np.float32).reshape(3, 4)
    record = np.zeros((), dtype=[("features", np.float32, (2, 4)), ("boxes", np.float32, (2, 4)),
                                 ("image_size", np.float64, (2,))])
    record["features"] = 1.5
    record["boxes"] = [[0, 0, 5, 5], [1, 1, 3, 4]]
    record["image_size"] = (10, 8)
    np.savez(tmp_path / "regions.npz", **{"1000": features, "2000": record})
    regions = read_region_features(tmp_path / "regions.npz")
    assert sorted(regions) == ["1000", "2000"]
    np.testing.assert_array_equal(regions["1000"].features, features)
    assert regions["1000"].boxes is None
    np.testing.assert_array_equal(regions["2000"].features, np.full((2, 4), 1.5, dtype=np.float32))
    np.testing.assert_array_equal(regions["2000"].boxes, [[0, 0, 5, 5], [1, 1, 3, 4]])
    assert regions["2000"].image_size == (10.0, 8.0)


def test_bottom_up_tsv(tmp_path: Path) -> None:
    features = np.linspace(0, 1, 2 * 5, dtype=np.float32).reshape(2, 5)
    boxes = np.array([[0, 0, 9, 9], [2, 3, 4, 5]], dtype=np.float32)
    encode = lambda array: base64.b64encode(array.tobytes()).decode()  # noqa: E731
    (tmp_path / "regions.tsv").write_text(f"42\t640\t480\t2\t{encode(boxes)}\t{encode(features)}\n")
    regions = read_region_features(tmp_path / "regions.tsv")
    np.testing.assert_array_equal(regions["42"].features, features)
    np.testing.assert_array_equal(regions["42"].boxes, boxes)
    assert regions["42"].image_size == (640.0, 480.0)


def test_bad_files_name_the_problem(tmp_path: Path) -> None:
    (tmp_path / "short.tsv").write_text("42\t640\t480\n")
    with pytest.raises(InputError, match="short.tsv:1: expected the 6 tab-separated fields"):
        read_region_features(tmp_path / "short.tsv")
    (tmp_path / "odd.tsv").write_text(f"42\t640\t480\t3\t{base64.b64encode(np.zeros(12, np.float32).tobytes()).decode()}"
                                      f"\t{base64.b64encode(np.zeros(10, np.float32).tobytes()).decode()}\n")
    with pytest.raises(InputError, match="odd.tsv:1 features holds 10 values, not a multiple of num_boxes = 3"):
        read_region_features(tmp_path / "odd.tsv")
    np.savez(tmp_path / "objects.npz", a=np.array([object()], dtype=object))
    with pytest.raises(InputError, match="not a readable .npz without pickles"):
        read_region_features(tmp_path / "objects.npz")
    encode = lambda array: base64.b64encode(array.tobytes()).decode()  # noqa: E731
    line = f"42\t640\t480\t1\t{encode(np.zeros(4, np.float32))}\t{encode(np.ones(3, np.float32))}\n"
    (tmp_path / "twice.tsv").write_text(line + line.replace("42", "7", 1) + line)
    with pytest.raises(InputError, match="twice.tsv:3: image id '42' is also on line 1; each image's regions must "
                                         "appear once"):
        read_region_features(tmp_path / "twice.tsv")
    (tmp_path / "latin1.tsv").write_bytes(line.replace("42", "caf\u00e9", 1).encode("latin-1"))
    with pytest.raises(InputError, match="latin1.tsv is not UTF-8 text"):
        read_region_features(tmp_path / "latin1.tsv")
    for name, content, message in (("empty.npz", b"", "it is empty"),
                                   ("text.npz", b"not an archive", r"it starts with b'not an a'")):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(InputError, match=f"{name}' is not a .npz archive \\(a zip of .npy arrays\\): {message}"):
            read_region_features(tmp_path / name)
    np.savez(tmp_path / "whole.npz", a=np.zeros((36, 8), np.float32), b=np.ones((36, 8), np.float32))
    data = (tmp_path / "whole.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) - 40])  # the central directory's end is gone
    with pytest.raises(InputError, match="cut.npz' is not a"):
        read_region_features(tmp_path / "cut.npz")
    (tmp_path / "regions.json").write_text("{}")
    with pytest.raises(InputError, match="expected a .npz or a bottom-up .tsv"):
        read_region_features(tmp_path / "regions.json")


def test_npz_source_field_is_read_and_named_by_count_errors(tmp_path: Path) -> None:
    source = "capeval/bottom-up-frcnn-r101-vg@v1.0(max_boxes=36,min_boxes=36)"
    record = np.zeros((), dtype=[("features", np.float32, (10, 4)), ("source", f"S{len(source)}")])
    record["source"] = source.encode()
    np.savez(tmp_path / "regions.npz", made=record, plain=np.ones((10, 4), np.float32))
    regions = read_region_features(tmp_path / "regions.npz")
    assert regions["made"].source == source and regions["plain"].source is None
    assert regions["made"].validated(0).source == source
    with pytest.raises(InputError, match=r"images\[3\]\.features has 10 regions; this model needs 36 \(made by "
                                         r"capeval/bottom-up-frcnn-r101-vg@v1\.0\(max_boxes=36,min_boxes=36\)\)"):
        regions["made"].validated(3, num_regions=36)
    with pytest.raises(InputError, match=r"images\[3\]\.features has 10 regions; this model needs 36$"):
        regions["plain"].validated(3, num_regions=36)
    record = np.zeros((), dtype=[("features", np.float32, (10, 4)), ("source", "S2")])
    record["source"] = b"\xff\xfe"
    np.savez(tmp_path / "bad.npz", bad=record)
    with pytest.raises(InputError, match=r"^\S*bad.npz\['bad'\].source is not UTF-8 text"):
        read_region_features(tmp_path / "bad.npz")

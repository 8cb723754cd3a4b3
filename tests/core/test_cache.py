"""The on-disk cache's faults: an unusable cache_dir is refused when the scorer is made, a read-only cache is read and
never changed, and damage found at any time costs only the damaged rows (one warning, correct results)."""
from __future__ import annotations

import os
import re
import stat
import warnings
from pathlib import Path
from typing import Dict, Iterator

import numpy as np
import pytest

from capeval import CLIPScore, InputError
from capeval import cache as cache_module
from capeval.cache import DiskCache

ROWS = {f"key{k}": np.full(256, k, dtype=np.float32) for k in range(600)}  # 600 KB: many pages


def filled(folder: Path, namespace: str = "rows") -> Path:
    cache = DiskCache(folder, namespace)
    cache.put_many(ROWS)
    del cache  # closes the connection, which checkpoints the journal into the file
    path = folder / f"{namespace}.sqlite"
    assert path.is_file() and not (folder / f"{namespace}.sqlite-wal").exists()
    return path


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    """A folder for a cache that :func:`make_read_only` then makes read-only (its mode restored afterwards)."""
    folder = tmp_path / "shared-cache"
    folder.mkdir()
    yield folder
    folder.chmod(stat.S_IRWXU)


def make_read_only(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``folder`` read-only for this process: its mode and its files' say so, and (for tests run as root, whom
    modes do not stop) ``os.access`` says so too, as it does for any other user."""
    for path in [folder, *folder.iterdir()]:
        path.chmod(stat.S_IRUSR | stat.S_IXUSR if path.is_dir() else stat.S_IRUSR)
    real_access = os.access

    def access(path: object, mode: int, **kwargs: object) -> bool:
        if mode & os.W_OK and Path(str(path)).resolve().is_relative_to(folder.resolve()):
            return False
        return real_access(path, mode, **kwargs)

    monkeypatch.setattr(cache_module.os, "access", access)


def snapshot(folder: Path) -> Dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


@pytest.mark.parametrize("kind", ["file", "under a file"])
def test_an_unusable_cache_dir_is_refused_when_the_scorer_is_made(tiny_openai_clip, tmp_path: Path, kind: str) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    folder = blocker if kind == "file" else blocker / "cache"
    message = "is not a folder" if kind == "file" else "cannot be created"
    with pytest.raises(InputError, match=re.escape(f"cache_dir={str(folder)!r} {message}")):
        CLIPScore(model=tiny_openai_clip.hf_dir, cache_dir=folder)


def test_a_read_only_cache_is_read_and_never_changed(read_only: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    filled(read_only)
    make_read_only(read_only, monkeypatch)
    before = snapshot(read_only)
    cache = DiskCache(read_only, "rows")
    assert not cache.writable
    found = cache.get_many(list(ROWS))
    assert found.keys() == ROWS.keys() and all(np.array_equal(found[key], ROWS[key]) for key in ROWS)
    with pytest.warns(UserWarning, match="read-only: its rows are used, new rows are not stored") as caught:
        cache.put_many({"new": np.zeros(4, dtype=np.float32)})
        cache.put_many({"newer": np.zeros(4, dtype=np.float32)})
    assert len(caught) == 1
    assert cache.get_many(["new"]) == {}
    del cache
    assert snapshot(read_only) == before  # nothing moved, no journal left behind
    assert DiskCache(read_only, "absent").get_many(["key1"]) == {}  # a namespace it lacks: nothing to read


def test_a_scorer_uses_a_read_only_cache(tiny_openai_clip, capeval_test_data: Path, read_only: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    images = sorted((capeval_test_data / "flickr8k" / "images_224").glob("*.jpg"))[:3]
    captions = ["a dog", "a cat", "a boat"]
    expected = CLIPScore(model=tiny_openai_clip.hf_dir, cache_dir=read_only, num_workers=0).score(images, captions)
    make_read_only(read_only, monkeypatch)
    before = snapshot(read_only)
    warm = CLIPScore(model=tiny_openai_clip.hf_dir, cache_dir=read_only, num_workers=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warm.score(images, captions) == expected
    assert warm.engine.encoded == {"image": 0, "text": 0}
    with pytest.warns(UserWarning, match="read-only"):
        warm.score(images, ["a new caption", "a cat", "a boat"])
    assert snapshot(read_only) == before


def damage_the_middle(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2 // 4096 * 4096  # a whole page in the middle of the file
    data[middle:middle + 4096] = b"\xa5" * 4096
    path.write_bytes(bytes(data))


def test_damage_found_by_a_query_is_recovered_from(tmp_path: Path) -> None:
    path = filled(tmp_path)
    damage_the_middle(path)
    cache = DiskCache(tmp_path, "rows")
    with pytest.warns(UserWarning, match="rows.sqlite is damaged .*malformed.*; moved to .*rows.sqlite.corrupt") as caught:
        found = cache.get_many(list(ROWS))
    assert len(caught) == 1
    assert all(np.array_equal(found[key], ROWS[key]) for key in found)  # whatever it still gave is right
    assert (tmp_path / "rows.sqlite.corrupt").is_file()
    cache.put_many(ROWS)  # a fresh file
    assert cache.get_many(list(ROWS)).keys() == ROWS.keys()


def test_damage_found_while_writing_is_recovered_from(tmp_path: Path) -> None:
    path = filled(tmp_path)
    cache = DiskCache(tmp_path, "rows")
    cache.get_many(["key1"])  # opened before the damage
    damage_the_middle(path)
    with pytest.warns(UserWarning, match="is damaged"):
        cache.put_many({key: row + 1 for key, row in ROWS.items()})
    found = cache.get_many(list(ROWS))
    assert found.keys() == ROWS.keys() and all(np.array_equal(found[key], ROWS[key] + 1) for key in ROWS)


def test_a_damaged_read_only_cache_is_left_alone(read_only: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    damage_the_middle(filled(read_only))
    make_read_only(read_only, monkeypatch)
    before = snapshot(read_only)
    cache = DiskCache(read_only, "rows")
    with pytest.warns(UserWarning, match="damaged .* its folder is read-only; it is not used"):
        cache.get_many(list(ROWS))
    assert cache.get_many(["key1"]) == {}
    assert snapshot(read_only) == before


def test_a_damaged_cache_gives_the_scores_of_no_cache(tiny_openai_clip, capeval_test_data: Path,
                                                      tmp_path: Path) -> None:
    images = sorted((capeval_test_data / "flickr8k" / "images_224").glob("*.jpg"))[:4]
    captions = [f"caption {i} " + "word " * 30 for i in range(4)]
    expected = CLIPScore(model=tiny_openai_clip.hf_dir, num_workers=0).score(images, captions)
    CLIPScore(model=tiny_openai_clip.hf_dir, cache_dir=tmp_path, num_workers=0).score(images, captions)
    for path in tmp_path.glob("*.sqlite"):
        damage_the_middle(path) if path.stat().st_size >= 3 * 4096 else path.write_bytes(b"not a database" * 300)
    scorer = CLIPScore(model=tiny_openai_clip.hf_dir, cache_dir=tmp_path, num_workers=0)
    with pytest.warns(UserWarning, match="is damaged"):
        assert scorer.score(images, captions) == expected

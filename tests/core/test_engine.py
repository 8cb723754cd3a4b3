"""The embedding engine: deduplication, memory and disk caches, streaming, multi-process sharding."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from multiprocessing import get_context
from pathlib import Path
from typing import Callable, Iterator, List, Mapping, Optional

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from capeval import CLIPScore, engine as engine_module
from capeval.cache import DiskCache
from capeval.engine import Batch, EmbeddingEngine, RowProducer, fixed_size_batches
from capeval.hub import CHECKSUMS_NAME
from fixtures.paths import REPO_ROOT

CAPTIONS = [f"a photo of thing number {i}" for i in range(7)]


@pytest.fixture(scope="module")
def flickr_images(capeval_test_data: Path) -> list:
    """Ten 224px Flickr8k images."""
    return sorted((capeval_test_data / "flickr8k" / "images_224").glob("*.jpg"))[:10]


def _workload(flickr_images: list, n: int = 24):
    images = [flickr_images[i % len(flickr_images)] for i in range(n)]
    candidates = [CAPTIONS[i % len(CAPTIONS)] for i in range(n)]
    references = [[CAPTIONS[(i + 1) % 7], f"reference {i % 5}"] for i in range(n)]
    return images, candidates, references


def test_each_unique_image_and_text_is_encoded_once(flickr_images, tiny_openai_clip) -> None:
    scorer = CLIPScore(model=tiny_openai_clip.hf_dir)
    images, candidates, references = _workload(flickr_images)
    clip_only = scorer.score(images, candidates)
    assert scorer.engine.encoded == {"image": 10, "text": 7}
    with_refs = scorer.score(images, candidates, references)
    assert scorer.engine.encoded == {"image": 10, "text": 7 + 5}  # only the new reference texts
    assert with_refs["clip_scores"] == clip_only["clip_scores"]
    scorer.score(images, candidates, references)
    assert scorer.engine.encoded == {"image": 10, "text": 12}


def test_streamed_input_in_chunks_equals_list_input(flickr_images, tiny_openai_clip) -> None:
    images, candidates, references = _workload(flickr_images)
    listed = CLIPScore(model=tiny_openai_clip.hf_dir).score(images, candidates, references)
    streamed = CLIPScore(model=tiny_openai_clip.hf_dir, chunk_size=5).score(
        iter(images), (c for c in candidates), iter(references))
    # chunks form other batches, and fp32 matrix products differ in the last bits with batch composition
    for name in ("clip_scores", "ref_clip_scores"):
        np.testing.assert_allclose(streamed[name], listed[name], rtol=0, atol=1e-6)
    assert len(streamed["clip_scores"]) == 24


def test_disk_cache_is_reused_by_a_fresh_scorer(flickr_images, tiny_openai_clip, tmp_path) -> None:
    images, candidates, references = _workload(flickr_images)
    cold = CLIPScore(model=tiny_openai_clip.hf_dir, cache_dir=tmp_path)
    expected = cold.score(images, candidates, references)
    warm = CLIPScore(model=tiny_openai_clip.hf_dir, cache_dir=tmp_path)
    assert warm.score(images, candidates, references) == expected
    assert warm.engine.encoded == {"image": 0, "text": 0}


def test_disk_cache_never_serves_another_model(flickr_images, tiny_openai_clip, tmp_path) -> None:
    images, candidates, _ = _workload(flickr_images)
    CLIPScore(model=tiny_openai_clip.hf_dir, cache_dir=tmp_path / "cache").score(images, candidates)
    changed = tmp_path / "changed"
    shutil.copytree(tiny_openai_clip.hf_dir, changed)
    (changed / CHECKSUMS_NAME).unlink()  # weights changed by other code than capeval's converter
    weights = load_file(changed / "model.safetensors")
    weights["visual_projection.weight"] = weights["visual_projection.weight"] * 1.5
    save_file(weights, changed / "model.safetensors", metadata={"format": "pt"})
    other = CLIPScore(model=changed, cache_dir=tmp_path / "cache")
    other.score(images, candidates)
    assert other.engine.encoded == {"image": 10, "text": 7}


@pytest.mark.parametrize("version", ["encoders.PREPROCESSING_VERSION", "modeling.FORWARD_VERSION"])
def test_disk_cache_never_serves_another_preprocessing_or_forward_version(flickr_images, tiny_openai_clip, tmp_path,
                                                                          monkeypatch, version: str) -> None:
    images, candidates, _ = _workload(flickr_images)
    CLIPScore(model=tiny_openai_clip.hf_dir, cache_dir=tmp_path).score(images, candidates)
    monkeypatch.setattr(f"capeval.models.clip.{version}", "changed")
    again = CLIPScore(model=tiny_openai_clip.hf_dir, cache_dir=tmp_path)
    again.score(images, candidates)
    assert again.engine.encoded == {"image": 10, "text": 7}


def test_corrupt_entries_are_recomputed_not_trusted(flickr_images, tiny_openai_clip, tmp_path) -> None:
    images, candidates, _ = _workload(flickr_images)
    expected = CLIPScore(model=tiny_openai_clip.hf_dir, cache_dir=tmp_path).score(images, candidates)
    image_db = next(tmp_path.glob("image-*.sqlite"))
    with sqlite3.connect(image_db) as connection:
        key, data = connection.execute("SELECT key, data FROM rows LIMIT 1").fetchone()
        tampered = np.frombuffer(data, dtype=np.float32) + 1
        connection.execute("UPDATE rows SET data = ? WHERE key = ?", (tampered.tobytes(), key))
        key2 = connection.execute("SELECT key FROM rows WHERE key != ? LIMIT 1", (key,)).fetchone()[0]
        connection.execute("UPDATE rows SET dim = 3 WHERE key = ?", (key2,))
    scorer = CLIPScore(model=tiny_openai_clip.hf_dir, cache_dir=tmp_path)
    with pytest.warns(UserWarning, match="2 corrupt entries"):
        assert scorer.score(images, candidates) == expected
    assert scorer.engine.encoded == {"image": 2, "text": 0}


def test_unreadable_cache_file_is_set_aside(flickr_images, tiny_openai_clip, tmp_path) -> None:
    images, candidates, _ = _workload(flickr_images)
    expected = CLIPScore(model=tiny_openai_clip.hf_dir, cache_dir=tmp_path).score(images, candidates)
    text_db = next(tmp_path.glob("text-*.sqlite"))
    for leftover in tmp_path.glob("text-*.sqlite-*"):
        leftover.unlink()
    text_db.write_bytes(b"this is not a database" * 100)
    scorer = CLIPScore(model=tiny_openai_clip.hf_dir, cache_dir=tmp_path)
    with pytest.warns(UserWarning, match="is damaged .*moved to .*corrupt"):
        assert scorer.score(images, candidates) == expected
    assert scorer.engine.encoded == {"image": 0, "text": 7}


def _write_rows(path: str, worker: int) -> None:
    cache = DiskCache(path, "concurrent")
    for round_ in range(20):
        cache.put_many({f"key{k}": np.full(8, k, dtype=np.float32) for k in range(worker, 200, 2 + round_ % 3)})


def test_concurrent_writers_leave_a_consistent_cache(tmp_path) -> None:
    context = get_context("spawn")
    workers = [context.Process(target=_write_rows, args=(str(tmp_path), w)) for w in range(3)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(timeout=120)
        assert process.exitcode == 0
    rows = DiskCache(tmp_path, "concurrent").get_many([f"key{k}" for k in range(200)])
    assert len(rows) == 200
    assert all(np.array_equal(row, np.full(8, int(key[3:]), dtype=np.float32)) for key, row in rows.items())


def test_threads_sharing_one_disk_cache_write_every_row(tmp_path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    cache = DiskCache(tmp_path, "threads")

    def write(worker: int) -> None:
        for k in range(200):
            cache.put_many({f"w{worker}k{k}": np.full(4, k, dtype=np.float32)})

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(write, range(4)))  # re-raises any thread's error
    keys = [f"w{worker}k{k}" for worker in range(4) for k in range(200)]
    assert len(cache.get_many(keys)) == 800


class WordLengths(RowProducer[str]):
    """Rows ``[len(word)] * 3`` in batches of two words; raises ``KeyboardInterrupt`` instead of batch ``stop_at``,
    and calls ``before_batch(index)`` before computing each batch."""

    kind = "word"

    def __init__(self, stop_at: Optional[int] = None, before_batch: Callable[[int], None] = lambda index: None) -> None:
        self.stop_at, self.before_batch = stop_at, before_batch
        self.computed: List[str] = []

    def key(self, item: str) -> str:
        return item

    def cache_key(self) -> str:
        return "word-lengths-1"

    def plan(self, items: Mapping[str, str]) -> List[Batch]:
        return fixed_size_batches(items, 2)

    def encode(self, batches: List[List[str]]) -> Iterator[List[np.ndarray]]:
        for index, batch in enumerate(batches):
            self.before_batch(index)
            if index == self.stop_at:
                raise KeyboardInterrupt
            self.computed += batch
            yield [np.full(3, len(word), dtype=np.float32) for word in batch]


WORDS = ["a", "bb", "ccc", "dddd", "eeeee", "ffffff"]


def test_memory_cache_nbytes_counts_the_cached_rows_up_to_the_bound() -> None:
    engine = EmbeddingEngine([WordLengths()], memory_cache_bytes=4 * 3 * 4)  # four rows of three float32
    assert engine.memory_cache_nbytes == 0
    engine.rows("word", WORDS[:3])
    assert engine.memory_cache_nbytes == 3 * 3 * 4
    engine.rows("word", WORDS)  # six distinct rows through a cache of four
    assert engine.memory_cache_nbytes == 4 * 3 * 4


def test_an_interrupted_request_keeps_the_rows_it_computed(tmp_path) -> None:
    interrupted = WordLengths(stop_at=2)
    with pytest.raises(KeyboardInterrupt):
        EmbeddingEngine([interrupted], cache_dir=tmp_path).rows("word", WORDS)
    assert interrupted.computed == WORDS[:4]
    resumed = WordLengths()
    rows = EmbeddingEngine([resumed], cache_dir=tmp_path).rows("word", WORDS)
    assert resumed.computed == WORDS[4:]  # the first two batches came from the disk cache
    np.testing.assert_array_equal(rows, np.repeat(np.arange(1, 7, dtype=np.float32)[:, None], 3, axis=1))


@pytest.mark.parametrize("write_seconds, on_disk_before_each_batch", [(0.0, [0, 2, 4]), (3600.0, [0, 0, 0])])
def test_rows_reach_the_disk_while_a_request_runs(tmp_path, monkeypatch, write_seconds: float,
                                                 on_disk_before_each_batch: List[int]) -> None:
    """Rows are written at least every ``DISK_WRITE_SECONDS`` during a request, not only at its end."""
    monkeypatch.setattr(engine_module, "DISK_WRITE_SECONDS", write_seconds)
    seen: List[int] = []
    producer = WordLengths(before_batch=lambda index: seen.append(len(disk.get_many(WORDS))))
    engine = EmbeddingEngine([producer], cache_dir=tmp_path)
    disk = DiskCache(tmp_path, engine.cache_namespace("word"))
    engine.rows("word", WORDS)
    assert seen == on_disk_before_each_batch
    assert len(disk.get_many(WORDS)) == 6


FAILING_SHARE_SCRIPT = """
import sys
import numpy as np
from capeval.engine import EmbeddingEngine, RowProducer, fixed_size_batches
from capeval.inputs import InputError

class Letters(RowProducer):
    kind = "letter"
    def key(self, item): return item
    def cache_key(self): return "letters"
    def plan(self, items): return fixed_size_batches(items, 1)
    def encode(self, batches):
        for batch in batches:
            if batch == ["d"]:
                raise InputError("images[3]: cannot be decoded")
            yield [np.zeros(2, dtype=np.float32)]

engine = EmbeddingEngine([Letters()])
assert engine.state.num_processes == 2
try:
    engine.rows("letter", ["a", "b", "c", "d"])
    outcome = "no error"
except InputError as error:
    outcome = str(error)
open(f"{sys.argv[1]}/rank{engine.state.process_index}.txt", "w").write(outcome)
engine.state.destroy_process_group()
"""


def test_a_failing_share_raises_on_every_process_instead_of_hanging(tmp_path) -> None:
    """Process 1 computes "b" and "d" (batches are dealt in turn) and fails on "d"; process 0, done with its own
    share, raises the same InputError instead of waiting for rows that never come."""
    script = tmp_path / "fail.py"
    script.write_text(FAILING_SHARE_SCRIPT)
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port",
               "29519", str(script), str(tmp_path)]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=300,
                               env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)})
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert [(tmp_path / f"rank{rank}.txt").read_text() for rank in range(2)] == ["images[3]: cannot be decoded"] * 2


DISTRIBUTED_SCRIPT = """
import json, sys
from capeval import CLIPScore
model, out, payload = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
scorer = CLIPScore(model=model, batch_size=4, text_batch_size=4)
result = scorer.score(payload["images"], payload["candidates"], payload["references"])
result["encoded"] = scorer.engine.encoded
assert scorer.engine.state.num_processes == 2
json.dump(result, open(f"{out}/rank{scorer.engine.state.process_index}.json", "w"))
scorer.engine.state.destroy_process_group()
"""


def test_two_processes_equal_one_exactly(flickr_images, tiny_openai_clip, tmp_path) -> None:
    images, candidates, references = _workload(flickr_images, 30)
    payload = tmp_path / "payload.json"
    payload.write_text(json.dumps({"images": [str(p) for p in images], "candidates": candidates,
                                   "references": references}))
    script = tmp_path / "score.py"
    script.write_text(DISTRIBUTED_SCRIPT)
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "29517",
               str(script), str(tiny_openai_clip.hf_dir), str(tmp_path), str(payload)]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=600,
                               env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)})
    assert completed.returncode == 0, completed.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    torch.set_num_threads(1)
    try:
        single = CLIPScore(model=tiny_openai_clip.hf_dir, batch_size=4, text_batch_size=4).score(
            images, candidates, references)
    finally:
        torch.set_num_threads(2)
    images_encoded = []
    for rank in ranks:
        encoded = rank.pop("encoded")
        assert rank == single
        assert 0 < encoded["image"] < 10  # each process encoded only its share of the 10 unique images
        images_encoded.append(encoded["image"])
    assert sum(images_encoded) == 10


def test_memory_cache_is_bounded_in_bytes_and_keeps_recent_rows() -> None:
    from capeval.cache import MemoryCache

    cache = MemoryCache(capacity_bytes=3 * 64 * 4)
    batch = np.arange(5 * 64, dtype=np.float32).reshape(5, 64)
    cache.put_many({f"k{i}": batch[i] for i in range(5)})
    assert len(cache) == 3 and cache.nbytes == 3 * 64 * 4
    assert sorted(cache.get_many([f"k{i}" for i in range(5)])) == ["k2", "k3", "k4"]
    assert all(row.base is None for row in cache.get_many(["k2", "k3", "k4"]).values())  # copies, not batch views
    cache.get_many(["k2"])
    cache.put_many({"k5": batch[0]})
    assert sorted(cache.get_many(["k2", "k3", "k4", "k5"])) == ["k2", "k4", "k5"]  # k3 was least recently used


def test_scoring_after_eviction_recomputes_the_same_rows(flickr_images, tiny_openai_clip) -> None:
    images, candidates, _ = _workload(flickr_images)
    scorer = CLIPScore(model=tiny_openai_clip.hf_dir)
    first = scorer.score(images, candidates)
    scorer.engine._memory["image"].capacity_bytes = 0
    scorer.engine._memory["image"].put_many({})
    assert len(scorer.engine._memory["image"]) == 0
    assert scorer.score(images, candidates) == first
    assert scorer.engine.encoded["image"] == 20

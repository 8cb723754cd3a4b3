"""The per-process table of loaded models that every family's loader keeps (:class:`capeval.hub.LoadedModels`): one
build per key however many threads ask at once, separate builds for separate keys, and tables that do not block one
another."""
from __future__ import annotations

import threading
import time
from typing import Callable, List

import pytest

from capeval.hub import LoadedModels

THREADS = 8


def counting_build(built: List[str], name: str, pause: float = 0.0) -> Callable[[], object]:
    """A build that records ``name`` in ``built`` and returns a new object; ``pause`` seconds inside the build leave
    other threads the time to ask for the same key while it runs."""

    def build() -> object:
        built.append(name)
        time.sleep(pause)
        return object()

    return build


def test_threads_asking_at_once_for_a_model_build_it_once() -> None:
    table: LoadedModels[object] = LoadedModels()
    built: List[str] = []
    start = threading.Barrier(THREADS)
    results: List[object] = [None] * THREADS

    def ask(index: int) -> None:
        start.wait()
        results[index] = table.get(("model", None, "cpu"), counting_build(built, "model", pause=0.2))

    threads = [threading.Thread(target=ask, args=(index,)) for index in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert built == ["model"]
    assert results[0] is not None and all(result is results[0] for result in results)


def test_each_key_is_built_separately_and_kept() -> None:
    table: LoadedModels[object] = LoadedModels()
    built: List[str] = []
    fp32 = table.get(("model", None, "cpu", "float32"), counting_build(built, "fp32"))
    fp16 = table.get(("model", None, "cpu", "float16"), counting_build(built, "fp16"))
    other = table.get(("other", None, "cpu", "float32"), counting_build(built, "other"))
    assert built == ["fp32", "fp16", "other"]
    assert len({id(fp32), id(fp16), id(other)}) == 3
    assert table.get(("model", None, "cpu", "float16"), counting_build(built, "again")) is fp16
    assert built == ["fp32", "fp16", "other"]
    table.clear()
    assert table.get(("model", None, "cpu", "float16"), counting_build(built, "after clear")) is not fp16
    assert built[-1] == "after clear"


def test_a_build_that_fails_keeps_nothing_and_is_tried_again() -> None:
    table: LoadedModels[object] = LoadedModels()

    def broken() -> object:
        raise OSError("no such folder")

    with pytest.raises(OSError, match="no such folder"):
        table.get("model", broken)
    built: List[str] = []
    table.get("model", counting_build(built, "model"))
    assert built == ["model"]


def test_unkept_builds_are_not_shared() -> None:
    table: LoadedModels[object] = LoadedModels()
    built: List[str] = []
    kept = table.get("model", counting_build(built, "kept"))
    own = table.build_unkept(counting_build(built, "own"))
    assert own is not kept and built == ["kept", "own"]
    assert table.get("model", counting_build(built, "again")) is kept


def test_a_build_may_load_from_another_table() -> None:
    """A Polos model loads its CLIP tower through the CLIP loader's table while its own table's lock is held."""
    outer: LoadedModels[object] = LoadedModels()
    inner: LoadedModels[object] = LoadedModels()
    built: List[str] = []
    tower = inner.get("clip", counting_build(built, "clip"))
    model = outer.get("polos", lambda: (inner.get("clip", counting_build(built, "clip again")), object()))
    assert model[0] is tower and built == ["clip"]

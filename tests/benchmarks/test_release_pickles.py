"""Release pickles are read by an unpickler that rebuilds numpy arrays and plain values and refuses every other
global by name, before anything could call it."""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from capeval.benchmarks import BenchmarkFormatError
from capeval.benchmarks.datasets.base import read_pickle
from capeval.inputs import InputError
from fixtures.video_benchmarks import command_pickle


class _Evaluates:
    def __reduce__(self):
        return eval, ("1 + 1",)


def test_globals_that_run_code_are_refused_by_name_without_running(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    (tmp_path / "system.pkl").write_bytes(command_pickle(f"touch {marker}"))
    with pytest.raises(InputError, match=r"system.pkl: refused to load the pickled global (posix|os|nt)\.system"):
        read_pickle(tmp_path / "system.pkl")
    assert not marker.exists()
    (tmp_path / "eval.pkl").write_bytes(pickle.dumps(_Evaluates()))
    with pytest.raises(InputError, match=r"eval.pkl: refused to load the pickled global builtins\.eval"):
        read_pickle(tmp_path / "eval.pkl")


def test_unpickler_admits_numpy_arrays_of_numpy_1_and_2_and_plain_values(tmp_path: Path) -> None:
    texts = np.array(["a dog runs .", "two men"], dtype=object)
    # protocol 3 names globals in text: the release's numpy 1 wrote numpy.core.multiarray where numpy 2 writes
    # numpy._core.multiarray
    modern = pickle.dumps(texts, protocol=3)
    assert b"cnumpy._core.multiarray\n_reconstruct\n" in modern
    (tmp_path / "numpy1.pkl").write_bytes(modern.replace(b"numpy._core.multiarray", b"numpy.core.multiarray"))
    assert read_pickle(tmp_path / "numpy1.pkl").tolist() == ["a dog runs .", "two men"]
    values = {"scores": np.arange(6.0).reshape(2, 3), "text": np.array(["ab", "c"]), "number": np.float32(0.5),
              "plain": [1, 2.5, "x", (None, True)]}
    for protocol in (4, 5):
        (tmp_path / "values.pkl").write_bytes(pickle.dumps(values, protocol=protocol))
        read = read_pickle(tmp_path / "values.pkl")
        assert read["scores"].tolist() == values["scores"].tolist() and read["text"].tolist() == ["ab", "c"]
        assert read["number"] == np.float32(0.5) and read["plain"] == [1, 2.5, "x", (None, True)]
    (tmp_path / "cut.pkl").write_bytes(pickle.dumps(values)[:40])
    with pytest.raises(BenchmarkFormatError, match=r"cut.pkl: not a readable pickle"):
        read_pickle(tmp_path / "cut.pkl")

"""User errors on the command line print one line and exit non-zero, never a traceback: an option a family cannot
run with, a model folder with an unreadable config, Ctrl-C."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from capeval.cli import main
from capeval.commands import score
from fixtures.paths import REPO_ROOT

EXAMPLES = REPO_ROOT / "examples" / "clipscore"


def one_line_error(argv: list, capsys: pytest.CaptureFixture) -> str:
    assert main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "Traceback" not in error
    return error


def test_a_precision_the_family_cannot_run_at(capsys: pytest.CaptureFixture) -> None:
    error = one_line_error(["score", "--metric", "tigerscore", "--images", str(EXAMPLES / "images"),
                            "--candidates", str(EXAMPLES / "good_captions.json"), "--references",
                            str(EXAMPLES / "refs.json"), "--model", str(REPO_ROOT), "--precision", "fp16"], capsys)
    assert error.startswith("capeval score: error: TIGEr runs SCAN in fp32 as trained")


def test_a_model_config_missing_a_field(tiny_openai_clip, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A BRIDGE folder whose config lacks a field: refused with the file and the field named."""
    from capeval.models.bridge.configuration import BridgeConfig

    folder = tmp_path / "bridge"
    folder.mkdir()
    values = BridgeConfig(backbone=str(tiny_openai_clip.hf_dir)).to_dict()
    del values["num_heads"]
    (folder / "config.json").write_text(json.dumps(values))
    (folder / "model.safetensors").write_bytes(b"")
    error = one_line_error(["score", "--metric", "bridge", "--images", str(EXAMPLES / "images"),
                            "--candidates", str(EXAMPLES / "good_captions.json"), "--model", str(folder)], capsys)
    assert f"{folder / 'config.json'}: BridgeConfig fields missing: ['num_heads']" in error


def test_ctrl_c_prints_one_line(tiny_openai_clip, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture) -> None:
    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(score, "_score_by_key", interrupted)
    assert main(["score", "--metric", "clipscore", "--images", str(EXAMPLES / "images"), "--candidates",
                 str(EXAMPLES / "good_captions.json"), "--model", str(tiny_openai_clip.hf_dir)]) == 130
    assert capsys.readouterr().err.strip() == "capeval score: interrupted"


LATIN_1 = '{"image1": "un caf\u00e9 au soleil"}'.encode("latin-1")


@pytest.mark.parametrize("flag", ["--candidates", "--references"])
def test_input_files_that_are_not_utf8_are_named(flag: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "latin1.json"
    bad.write_bytes(LATIN_1)
    files = {"--candidates": str(EXAMPLES / "good_captions.json"), "--references": str(EXAMPLES / "refs.json")}
    files[flag] = str(bad)
    argv = ["score", "--metric", "clipscore", "--images", str(EXAMPLES / "images")]
    for name, path in files.items():
        argv += [name, path]
    error = one_line_error(argv, capsys)
    assert error.endswith(f"{bad} is not UTF-8 text: byte 0xe9 on line 1 (offset 18); save it as UTF-8")


def test_benchmark_and_training_files_that_are_not_utf8_are_named(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture) -> None:
    from capeval.benchmarks.datasets.base import read_json, tab_rows
    from capeval.inputs import InputError

    bad = tmp_path / "annotations.json"
    bad.write_bytes(b"[\n" + LATIN_1 + b"\n]")
    for reader in (read_json, lambda path: list(tab_rows(path, 2))):
        with pytest.raises(InputError, match=r"annotations\.json is not UTF-8 text: byte 0xe9 on line 2"):
            reader(bad)
    error = one_line_error(["train", "bridge", "--annotations", str(bad), "--images", str(tmp_path),
                            "--output-dir", str(tmp_path / "out"), "--model-config", str(bad)], capsys)
    assert "annotations.json is not UTF-8 text" in error


def test_a_byte_order_mark_is_read_as_utf8(tmp_path: Path) -> None:
    from capeval.inputs import read_utf8

    marked = tmp_path / "bom.json"
    marked.write_bytes(b"\xef\xbb\xbf" + '{"a": "caf\u00e9"}'.encode())
    assert json.loads(read_utf8(marked)) == {"a": "caf\u00e9"}

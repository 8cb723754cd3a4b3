"""User errors on the command line print one line and exit non-zero, never a traceback: an option a family cannot
run with, a model folder with an unreadable config, Ctrl-C; the API's errors name its keywords, and the command
lines' the flags that take them."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from capeval.cli import build_parser, main
from capeval.commands import score
from capeval.commands.arguments import in_flags
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


def command_parser(*argv: str) -> argparse.ArgumentParser:
    """The parser of the (sub)command that ``argv`` runs."""
    return build_parser().parse_args(list(argv)).command_parser


def test_api_keywords_become_the_flags_of_the_command() -> None:
    """Each API keyword in an error becomes the flag whose ``dest`` it is, with its value as it would be typed."""
    scoring = command_parser("score", "--metric", "tigerscore")
    assert in_flags("TIGEr needs references: pass references=[[...], ...] (the references of each candidate)",
                    scoring) == "TIGEr needs references: pass --references FILE (the references of each candidate)"
    assert in_flags("or pass regions=<local folder> with a converted model", scoring) == \
        "or pass --detector <local folder> with a converted model"
    assert in_flags("cache_dir='/my cache' is not a folder; device='cuda:1': no CUDA device", scoring) == \
        "--cache-dir '/my cache' is not a folder; --device cuda:1: no CUDA device"
    unchanged = "refused by weights_only=True: /data/model='x' in candidates[2]"
    assert in_flags(unchanged, scoring) == unchanged
    benchmark = command_parser("benchmark", "--dataset", "foil", "--metric", "cider")
    assert in_flags("needs root=<folder> or source='hub'; root='/a' is not a folder; pass image_dir=<folder>; "
                    "references=2, but it must be 1 or 4", benchmark) == \
        ("needs --data-root <folder> or --source hub; --data-root /a is not a folder; pass --images <folder>; "
         "--references 2, but it must be 1 or 4")


def test_a_release_folder_is_asked_for_by_its_flag(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """``capeval benchmark`` on a video release names ``--data-root`` with a space and the folder, the API
    ``root=``."""
    from capeval.benchmarks import load_benchmark

    with pytest.raises(FileNotFoundError, match=r"^benchmark 'vatex-eval': needs root=<folder>; it reads the folder "
                                                r"of its release\. VATEX-EVAL \(Shi et al\., 2022\): pass root=<folder>"):
        load_benchmark("vatex-eval")
    error = one_line_error(["benchmark", "--dataset", "vatex-eval", "--metric", "emscore"], capsys)
    assert error.startswith("capeval benchmark: error: benchmark 'vatex-eval': needs --data-root <folder>; it reads "
                            "the folder of its release. VATEX-EVAL (Shi et al., 2022): pass --data-root <folder>, the "
                            "folder of the release")
    missing = tmp_path / "no release"
    error = one_line_error(["benchmark", "--dataset", "activitynet-foil", "--data-root", str(missing), "--metric",
                            "emscore"], capsys)
    assert error.startswith(f"capeval benchmark: error: benchmark 'activitynet-foil': --data-root '{missing}' is not "
                            "a folder; it reads the folder of its release. ActivityNet-FOIL")


def test_the_clip_converter_asks_for_its_flags(tiny_openclip, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """An OpenCLIP state dict without an architecture: the converter names ``arch=`` and ``model_name=``, its command
    line ``--arch`` and ``--model-name``."""
    from conversion import convert_clip
    from conversion.clip_converter import CheckpointError, convert_checkpoint

    with pytest.raises(CheckpointError, match=r"same key names: pass arch='openai' \(QuickGELU\) or arch='openclip' "
                                              r"\(exact GELU\), or model_name=<backbone> "):
        convert_checkpoint(tiny_openclip.checkpoint, tmp_path / "api")
    assert convert_clip.main(["--checkpoint", str(tiny_openclip.checkpoint), "--out", str(tmp_path / "cli")]) == 1
    assert capsys.readouterr().err == (
        "error: OpenAI and OpenCLIP checkpoints have the same key names: pass --arch openai (QuickGELU) or --arch "
        "openclip (exact GELU), or --model-name <backbone> (ViT-B-32 is openai, ViT-L-14 openclip)\n")


def test_regions_batch_size_is_checked_as_typed(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["regions", "--images", "x", "--out", "x.npz", "--batch-size", "0"])
    assert "argument --batch-size: must be at least 1, got 0" in capsys.readouterr().err

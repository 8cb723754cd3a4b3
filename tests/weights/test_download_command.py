"""``capeval download``: what it prints, files given by hand, refused arguments; and the README's table of sizes."""
from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from capeval import RegionFeatures, TIGErScore
from capeval.cli import main
from capeval.commands.download import _chosen_models
from capeval.fetch import converted_folder, read_provenance
from capeval.hub import DamagedWeightsError, check_weights
from capeval.inputs import InputError
from capeval.models.scan.loading import load_scan_model
from capeval.models.scan.loading import model_folder as scan_folder
from capeval.originals import SOURCES, readme_table
from capeval.transfers import sha256_of
from fixtures.originals_server import Misbehaviour, OriginalsServer
from fixtures.paths import REPO_ROOT

SCAN = "capeval/tiger-scan-coco"
PACSPP = "capeval/pacspp-clip-vit-b-32"


def test_download_then_tiger_scores_offline(online: OriginalsServer, stand_ins: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture, go_offline: Callable[[], None]) -> None:
    """What the download prints (the folder, each original, the NLTK data); offline afterwards it finds the model
    cached, and TIGEr scores with the default model and NLTK data with no request."""
    assert main(["download", SCAN]) == 0
    folder = converted_folder(SCAN)
    modules, *lines = capsys.readouterr().out.splitlines()
    assert modules.startswith("evaluate modules capeval/clipscore, capeval/pacscore, ") and \
        f"installed in {tmp_path / 'hf-home' / 'modules' / 'evaluate_modules' / 'metrics'} " in modules
    assert lines[0] == f"{SCAN}: fetched, converted by capeval 0.1.0 from its original files, in {folder}"
    assert lines[1:] == [
        f"  {name}: {(stand_ins / name).stat().st_size:,} bytes, sha256 {sha256_of(stand_ins / name)} (checked "
        f"against capeval's record), from {online.url}/{name}"
        for name in ("model_best.pth", "coco_precomp_vocab.json")] + [
        f"  NLTK data punkt_tab: {tmp_path / 'nltk_data' / 'tokenizers' / 'punkt_tab' / 'english'}"]
    online.requests.clear()
    go_offline()
    assert main(["download", SCAN]) == 0
    printed = capsys.readouterr()
    assert printed.out.splitlines()[1] == (f"{SCAN}: already in the cache, converted by capeval 0.1.0 from its "
                                           f"original files, in {folder}")
    assert printed.err == ("capeval download: warning: HF_HUB_OFFLINE or CAPEVAL_OFFLINE is set: nothing is "
                           "downloaded, only models already in the caches are found\n")
    regions = RegionFeatures(features=np.random.default_rng(0).random((36, 12), dtype=np.float32))
    result = TIGErScore(device="cpu").score([regions], ["a dog runs on the grass"], [["a dog is running"]])
    checkpoint = SOURCES[SCAN].files[0]
    assert f"|model:{SCAN}|revision:original-{checkpoint.sha256[:12]}|" in result["signature"]
    assert 0 < result["tiger_scores"][0] < 1
    assert online.requests == []


def test_a_file_obtained_by_hand_is_checked_and_converted(online: OriginalsServer, stand_ins: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    online.misbehaviour["PAC++_clip_ViT-B-32.pth"] = Misbehaviour(status=403)
    assert main(["download", PACSPP]) == 2
    assert "answered 403 Forbidden" in capsys.readouterr().err
    given = stand_ins / "PAC++_clip_ViT-B-32.pth"
    assert main(["download", PACSPP, "--original", str(given)]) == 0
    originals = read_provenance(converted_folder(PACSPP))["originals"]
    assert [(record["name"], record["url"], record["sha256"]) for record in originals] == [
        (given.name, f"file:{given.resolve()}", sha256_of(given)),
        ("bpe_simple_vocab_16e6.txt.gz", f"{online.url}/bpe_simple_vocab_16e6.txt.gz",
         SOURCES[PACSPP].files[1].sha256)]
    assert online.requests_for(given.name) == [None]  # the refused attempt only


def test_damaged_cached_weights_are_refused_then_built_again_by_download(online: OriginalsServer,
                                                                       capsys: pytest.CaptureFixture) -> None:
    assert main(["download", SCAN]) == 0
    folder = converted_folder(SCAN)
    weights = folder / "model.safetensors"
    damaged = bytearray(weights.read_bytes())
    damaged[-100] ^= 0xFF
    weights.write_bytes(bytes(damaged))
    with pytest.raises(DamagedWeightsError, match=f"{weights} has sha256 .* its bytes are damaged or were changed. Do "
                                                  f"not use these weights: run `capeval download {SCAN}`, which "
                                                  "builds the folder again from its original files"):
        load_scan_model(scan_folder(SCAN))
    capsys.readouterr()
    online.requests.clear()
    assert main(["download", SCAN]) == 0
    printed = capsys.readouterr()
    assert (f"capeval download: warning: model '{SCAN}': building its folder again from the original files, as the "
            f"cached one is damaged: {weights} has sha256 ") in printed.err
    assert f"{SCAN}: fetched, converted by capeval" in printed.out
    assert online.requests_for("model_best.pth") == [None]
    check_weights(folder)
    load_scan_model(scan_folder(SCAN))


def test_refused_arguments(online: OriginalsServer, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cases = [(["download"], "name the models to download, give --all, or --modules-only for the evaluate modules"),
             (["download", SCAN, "--modules-only"], "--modules-only installs the evaluate modules alone: give no "
                                                    "MODEL, --all or --original"),
             (["download", "capeval/nope"],
              "unknown model capeval/nope; capeval's models: openai/clip-vit-base-patch32, "),
             (["download", SCAN, "--all"], "give MODEL names or --all, not both"),
             (["download", SCAN, PACSPP, "--original", str(tmp_path / "x.pth")], "--original takes the files of one"),
             (["download", SCAN, "--original", str(tmp_path / "x.pth")],
              "--original .*x.pth: capeval/tiger-scan-coco's original files are called coco_precomp_vocab.json, "
              "model_best.pth"),
             (["download", SCAN, "--original", str(tmp_path / "model_best.pth")], "model_best.pth: no such file")]
    for argv, message in cases:
        assert main(argv) == 2
        error = capsys.readouterr().err
        assert error.startswith("capeval download: error: ") and re.search(message, error), (argv, error)
    assert online.requests == []


def test_bridge_says_it_has_no_published_weights(online: OriginalsServer, capsys: pytest.CaptureFixture) -> None:
    assert main(["download", "capeval/bridge-clip-vit-b-32"]) == 2
    assert "It has no original files to build it from: BRIDGE's authors released no weights" in capsys.readouterr().err


def test_all_means_every_published_model() -> None:
    chosen = _chosen_models(argparse.Namespace(all=True, models=[], original=[], modules_only=False))
    assert chosen == [name for name in SOURCES if name != "capeval/bridge-clip-vit-b-32"]
    with pytest.raises(InputError, match="--original takes the files of one MODEL"):
        _chosen_models(argparse.Namespace(all=True, models=[], original=[Path("x")], modules_only=False))
    assert _chosen_models(argparse.Namespace(all=False, models=[], original=[], modules_only=True)) == []


def test_readme_lists_the_download_sizes_of_the_table() -> None:
    assert f"\n{readme_table()}\n" in (REPO_ROOT / "README.md").read_text(encoding="utf-8")

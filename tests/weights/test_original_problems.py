"""Originals from a mirror folder, damaged originals (refused, removed and downloaded again, named when they do not
convert; a file given by hand is never removed) and no network (found once, said in one short line per model)."""
from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Callable, Iterator, List, Tuple

import huggingface_hub.constants
import pytest

from capeval.cli import main
from capeval.fetch import MIRROR_VARIABLE, OriginalUnavailableError, cache_root, converted_folder, fetch_model, \
    nltk_data, read_provenance
from capeval.hub import HUB_PROBES, ModelNotAvailableError
from capeval.models.scan.loading import model_folder as scan_folder
from capeval.originals import SOURCES
from capeval.transfers import UNREACHABLE
from fixtures.originals_server import Misbehaviour, OriginalsServer
from fixtures.paths import REPO_ROOT

SCAN = "capeval/tiger-scan-coco"
CHECKPOINT = "model_best.pth"
BOTTOM_UP = "capeval/bottom-up-frcnn-r101-vg"
DAMAGED = os.urandom(100_000)
"""A random 100 kB file in place of a checkpoint."""


def unrecorded(monkeypatch: pytest.MonkeyPatch, model: str, name: str, estimated_size: int) -> None:
    """Make the table say of one file what it says of most real originals: no exact size or sha256, an estimate."""
    source = SOURCES[model]
    files = tuple(file._replace(size=None, sha256=None, estimated_size=estimated_size) if file.name == name else file
                  for file in source.files)
    monkeypatch.setitem(SOURCES, model, source._replace(files=files))


def downloads(model: str) -> Path:
    return cache_root() / "downloads" / model.replace("/", "--")


# a mirror folder ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("form", ["folder", "folder/", "~/folder", "file://"])
def test_a_mirror_folder_is_a_path_or_a_file_url(form: str, online: OriginalsServer, stand_ins: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(stand_ins.parent))
    value = {"folder": str(stand_ins), "folder/": f"{stand_ins}/", "~/folder": f"~/{stand_ins.name}",
             "file://": stand_ins.as_uri()}[form]
    monkeypatch.setenv(MIRROR_VARIABLE, value)
    folder = scan_folder(SCAN)
    assert [(record["name"], record["url"], record["sha256_checked"]) for record in
            read_provenance(folder)["originals"]] == [
        (file.name, (stand_ins / file.name).as_uri(), True) for file in SOURCES[SCAN].files]
    assert all(online.requests_for(file.name) == [] for file in SOURCES[SCAN].files)
    assert (stand_ins / CHECKPOINT).is_file()  # copied, not moved


def test_a_mirror_folder_works_offline(online: OriginalsServer, stand_ins: Path, monkeypatch: pytest.MonkeyPatch,
                                       go_offline: Callable[[], None]) -> None:
    go_offline()
    monkeypatch.setenv(MIRROR_VARIABLE, str(stand_ins))
    assert scan_folder(SCAN) == converted_folder(SCAN)
    assert online.requests == []


def test_a_mirror_folder_without_the_file_says_so(online: OriginalsServer, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MIRROR_VARIABLE, str(tmp_path))
    with pytest.raises(OriginalUnavailableError, match=f"its original file {CHECKPOINT} .* cannot be had: cannot "
                                                       f"read {tmp_path / CHECKPOINT} \\(No such file or directory\\)"):
        fetch_model(SCAN, progress=False)


@pytest.mark.parametrize("value, problem", [("/no/such/folder", "is not a folder"),
                                            ("s3://bucket/originals", "is no URL capeval reads")])
def test_a_mirror_that_is_neither_a_folder_nor_a_url_is_refused(value: str, problem: str, online: OriginalsServer,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MIRROR_VARIABLE, value)
    with pytest.raises(OriginalUnavailableError) as raised:
        fetch_model(SCAN, progress=False)
    assert str(raised.value) == (f"{MIRROR_VARIABLE}={value!r} {problem}: give a folder holding the original files, "
                                 "a file:// URL or an http(s):// base URL")


def test_readme_shows_the_three_forms_of_the_mirror_and_an_offline_example() -> None:
    readme = " ".join((REPO_ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "`CAPEVAL_ORIGINALS_MIRROR` takes every original file from a folder on this machine (`/data/originals`), " \
           "a `file://` URL or an `http(s)://` base URL" in readme
    assert "HF_HUB_OFFLINE=1 CAPEVAL_ORIGINALS_MIRROR=/data/originals capeval download capeval/tiger-scan-coco" in readme


# damaged originals --------------------------------------------------------------------------------------------

def test_a_file_far_from_its_estimated_size_is_refused_removed_and_downloaded_again(
        online: OriginalsServer, stand_ins: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """100 kB where about 55 MB is expected, with no size or sha256 on record: refused, and not kept for the next
    run, which downloads the file again."""
    unrecorded(monkeypatch, SCAN, CHECKPOINT, 13_651_020 * 4)
    online.misbehaviour[CHECKPOINT] = Misbehaviour(body=DAMAGED)
    with pytest.raises(OriginalUnavailableError) as raised:
        fetch_model(SCAN, progress=False)
    path = downloads(SCAN) / CHECKPOINT
    assert str(raised.value) == (
        f"model {SCAN!r}: its original file {CHECKPOINT} is not usable: {path} has 100,000 bytes, far from the 55 MB "
        f"estimated for {CHECKPOINT} (its exact size is not recorded; a file more than 10 times smaller or larger is "
        "refused): truncated or another file. The copy was removed from capeval's downloads: replace "
        f"{CHECKPOINT} on the mirror ({online.url}/{CHECKPOINT}) with its authors' file.")
    assert not path.exists()
    del online.misbehaviour[CHECKPOINT]
    unrecorded(monkeypatch, SCAN, CHECKPOINT, (stand_ins / CHECKPOINT).stat().st_size)
    fetch_model(SCAN, progress=False)
    assert online.requests_for(CHECKPOINT) == [None, None]


@pytest.mark.parametrize("model, name, served, problem", [
    (SCAN, CHECKPOINT, DAMAGED, "CheckpointError: checkpoint '{path}' refused or unreadable: "),
    (BOTTOM_UP, "config.yaml", b"MODEL: {" + b" " * 1000, "ParserError: while parsing a flow node expected the node "
                                                          "content, but found '<stream end>'")])
def test_an_original_that_does_not_convert_is_named_removed_and_downloaded_again(
        model: str, name: str, served: bytes, problem: str, online: OriginalsServer, stand_ins: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The file and what is wrong with it in one line, what to do, and no URL to download it from by hand (that URL
    was tried); the next run downloads it again."""
    monkeypatch.delenv(MIRROR_VARIABLE)
    source = SOURCES[model]
    files = tuple(file._replace(url=f"{online.url}/{file.name}", drive_path=None) for file in source.files)
    monkeypatch.setitem(SOURCES, model, source._replace(files=files))
    unrecorded(monkeypatch, model, name, len(served))
    online.misbehaviour[name] = Misbehaviour(body=served)
    with pytest.raises(OriginalUnavailableError) as raised:
        fetch_model(model, progress=False)
    message = str(raised.value)
    path = downloads(model) / name
    assert message.startswith(f"model {model!r}: its original file {name} is not usable: {path} does not convert "
                              f"({problem.format(path=path)}")
    assert message.endswith(f"). The copy was removed from capeval's downloads: run the same command to download it "
                            f"again; if it fails the same way, the file published at {online.url}/{name} is not the "
                            f"one capeval converts: give a copy of the original with `capeval download {model} "
                            "--original FILE`.")
    assert "By hand" not in message and "\n" not in message
    assert not downloads(model).exists() and not converted_folder(model).exists()
    del online.misbehaviour[name]
    unrecorded(monkeypatch, model, name, (stand_ins / name).stat().st_size)
    fetch_model(model, progress=False)
    assert online.requests_for(name) == [None, None]


def test_a_file_given_by_hand_is_never_removed(online: OriginalsServer, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    given = tmp_path / CHECKPOINT
    given.write_bytes(DAMAGED)
    unrecorded(monkeypatch, SCAN, CHECKPOINT, len(DAMAGED))
    with pytest.raises(OriginalUnavailableError) as raised:
        fetch_model(SCAN, {CHECKPOINT: given}, progress=False)
    assert str(raised.value).startswith(f"model {SCAN!r}: its original file {CHECKPOINT} is not usable: {given} does "
                                        "not convert (CheckpointError: ")
    assert str(raised.value).endswith(f"{given} was given with --original and is left as it is: give the authors' "
                                      f"{CHECKPOINT} (published at {SOURCES[SCAN].files[0].url} (the file "
                                      "runs/coco_scan/log/model_best.pth in that Google Drive folder)).")
    unrecorded(monkeypatch, SCAN, CHECKPOINT, 55_000_000)
    with pytest.raises(OriginalUnavailableError, match=f"{given} has 100,000 bytes, far from the 55 MB estimated "):
        fetch_model(SCAN, {CHECKPOINT: given}, progress=False)
    assert given.read_bytes() == DAMAGED


# no network ------------------------------------------------------------------------------------------------------

@pytest.fixture
def no_network(online: OriginalsServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[List[Tuple[str, int]]]:
    """No network: the hub's endpoint is a loopback port that refuses connections, every other host's name fails
    to resolve, there is no mirror, and huggingface_hub's retries do not sleep. Returns the list of connections
    tried to the hub's port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed once the block ends: connections to it are refused
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.delenv(MIRROR_VARIABLE)
    resolve = socket.getaddrinfo

    def unresolved(host: object, *args: object, **kwargs: object) -> object:
        if host not in ("127.0.0.1", "::1", "localhost"):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return resolve(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", unresolved)
    tried: List[Tuple[str, int]] = []
    connect = socket.socket.connect

    def counted(self: socket.socket, address: object) -> None:
        if isinstance(address, tuple) and address[1] == port:
            tried.append(address)
        return connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", counted)
    monkeypatch.setattr(time, "sleep", lambda seconds: None)
    yield tried
    HUB_PROBES.clear()  # forget this test's network
    UNREACHABLE.clear()


def test_no_network_is_found_once_and_each_model_fails_in_one_short_line(
        no_network: List[Tuple[str, int]], capsys: pytest.CaptureFixture) -> None:
    models = [BOTTOM_UP, "capeval/vilbert-multi-task", SCAN, "Salesforce/blip-image-captioning-large"]
    assert main(["download", *models]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert len(no_network) == 1, "one probe of the hub, no retry"
    assert not any("Retrying in" in line for line in errors)
    hub = f"{huggingface_hub.constants.ENDPOINT} cannot be reached ([Errno 111] Connection refused)"
    no_network_found = "there is no network (neither the hub nor huggingface.co can be reached: Name or service not " \
                       "known)"
    assert errors[0] == (
        f"capeval download: error: model '{BOTTOM_UP}': its original file pytorch_model.bin cannot be downloaded: "
        f"{no_network_found}. Run `capeval download {BOTTOM_UP}` where there is network access (with the same HF_HOME "
        f"or CAPEVAL_CACHE), or give its original files: {MIRROR_VARIABLE}=<a folder holding them>, or `--original "
        "FILE...`")
    assert errors[1].startswith("capeval download: error: model 'capeval/vilbert-multi-task': its original file "
                                f"multi_task_model.bin cannot be downloaded: {no_network_found}. Run `capeval download "
                                "capeval/vilbert-multi-task` where there is network ")
    assert errors[2].startswith(f"capeval download: error: model '{SCAN}': its original file {CHECKPOINT} cannot be "
                                "downloaded: there is no network")
    assert errors[3].startswith("capeval download: error: model 'Salesforce/blip-image-captioning-large' ")
    assert errors[3].endswith(f"Cause: {hub}")
    assert errors[4] == f"capeval download: 4 of 4 models could not be had: {', '.join(models)}"
    for model, line in zip(models, errors):
        assert len(line) < 550 and line.count(model) <= 2, line


def test_the_hub_log_shows_only_when_verbose(online: OriginalsServer, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture) -> None:
    """huggingface_hub's warnings (its retries among them) are kept to errors unless ``--verbose``."""
    from huggingface_hub.utils import logging as hub_logging

    from capeval.commands import download

    levels = {}

    def record(args: object) -> int:
        levels[args.verbose] = hub_logging.get_verbosity()
        return 0

    monkeypatch.setattr(download, "run", record)
    before = hub_logging.get_verbosity()
    for verbose in (False, True):
        assert main((["--verbose"] if verbose else []) + ["download", SCAN]) == 0
    assert levels == {False: hub_logging.ERROR, True: before}
    assert hub_logging.get_verbosity() == before


def test_nltk_data_is_not_asked_for_once_there_is_no_network(online: OriginalsServer) -> None:
    scan_folder(SCAN)  # the model is had; its NLTK data is not installed
    HUB_PROBES["https://hub.invalid"] = "https://hub.invalid cannot be reached (Name or service not known)"
    UNREACHABLE["raw.githubusercontent.com"] = "Name or service not known"
    online.requests.clear()
    try:
        with pytest.raises(ModelNotAvailableError) as raised:
            nltk_data("punkt_tab", SCAN)
    finally:
        HUB_PROBES.clear()
        UNREACHABLE.clear()
    assert str(raised.value) == (
        f"{SCAN} needs NLTK's 'punkt_tab' data, which is not installed, and there is no network (neither the hub nor "
        f"raw.githubusercontent.com can be reached: Name or service not known): run `capeval download {SCAN}` where "
        "there is network access, with the same NLTK_DATA, or `python -m nltk.downloader punkt_tab`")
    assert online.requests == []

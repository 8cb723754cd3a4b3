"""Fixtures of the weight-fetching tests: stand-in originals served by a loopback server that also stands in for the
hub, an empty cache per test, and a guard that fails any connection to another host."""
from __future__ import annotations

import socket
import sys
import zipfile
from pathlib import Path
from typing import Callable, Dict, Iterator

import evaluate.config
import huggingface_hub.constants
import nltk
import nltk.pathsec
import pytest
from nltk.downloader import Downloader

from capeval.fetch import MIRROR_VARIABLE
from capeval.hub import HUB_PROBES, LoadedModels
from capeval.models.clip import loading as clip_loading
from capeval.models.scan import loading as scan_loading
from capeval.models.vilbert import loading as vilbert_loading
from capeval.originals import SOURCES, ModelSource
from capeval.transfers import UNREACHABLE, sha256_of
from fixtures.originals_server import OriginalsServer, start_server
from fixtures.stand_in_originals import stand_in_sources, write_stand_ins
from fixtures.tiger_checkpoints import load_goldens

LOOPBACK = ("127.0.0.1", "::1", "localhost")


@pytest.fixture(scope="session")
def stand_ins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of stand-in originals, under their real file names."""
    return write_stand_ins(tmp_path_factory.mktemp("originals"))


@pytest.fixture(scope="session")
def stand_in_table(stand_ins: Path) -> Dict[str, ModelSource]:
    return stand_in_sources(stand_ins)


@pytest.fixture(scope="session")
def nltk_index(stand_ins: Path, server: OriginalsServer) -> str:
    """URL of an NLTK data index on the loopback server offering ``punkt_tab`` (the Punkt parameters of TIGEr's
    goldens, zipped as NLTK zips its packages)."""
    archive = stand_ins / "punkt_tab.zip"
    punkt = load_goldens()["cases"]["punkt"]
    with zipfile.ZipFile(archive, "w") as zipped:
        for name, text in punkt.items():
            zipped.writestr(f"punkt_tab/english/{name}", text)
    unzipped = sum(len(text.encode("utf-8")) for text in punkt.values())
    (stand_ins / "nltk_index.xml").write_text(
        f'<?xml version="1.0"?>\n<nltk_data><packages><package id="punkt_tab" name="Punkt" subdir="tokenizers" '
        f'url="{server.url}/punkt_tab.zip" size="{archive.stat().st_size}" unzipped_size="{unzipped}" unzip="1" '
        f'sha256_checksum="{sha256_of(archive)}" /></packages><collections /></nltk_data>\n', encoding="utf-8")
    return f"{server.url}/nltk_index.xml"


@pytest.fixture(scope="session")
def server(stand_ins: Path) -> Iterator[OriginalsServer]:
    state, httpd = start_server(stand_ins)
    yield state
    httpd.shutdown()


def refuse_other_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every connection to a host other than this machine fail the test (the real URLs are never contacted)."""
    connect = socket.socket.connect

    def guarded(self: socket.socket, address: object) -> None:
        if isinstance(address, tuple) and address[0] not in LOOPBACK:
            raise AssertionError(f"a test tried to connect to {address}")
        return connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)


@pytest.fixture
def go_offline(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Call it to set HF_HUB_OFFLINE for the rest of the test (as the environment and as the hub library reads it)."""
    def offline() -> None:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    return offline


@pytest.fixture
def online(server: OriginalsServer, stand_in_table: Dict[str, ModelSource], nltk_index: str, tmp_path: Path,
           monkeypatch: pytest.MonkeyPatch) -> OriginalsServer:
    """Network allowed, with the hub, every original host and NLTK's data index replaced by the loopback server (the
    hub's API answers 404: no capeval repository exists), the table describing the stand-ins, empty caches under
    ``tmp_path`` (NLTK's data path and evaluate's module cache too), and empty model caches of the loaders."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("CAPEVAL_CACHE", raising=False)
    monkeypatch.delenv("CAPEVAL_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", server.url)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.setattr(evaluate.config, "HF_MODULES_CACHE", tmp_path / "hf-home" / "modules")
    monkeypatch.setattr(sys, "path", [*sys.path])  # evaluate puts its module cache on the import path
    monkeypatch.setenv(MIRROR_VARIABLE, server.url)
    for model, source in stand_in_table.items():
        monkeypatch.setitem(SOURCES, model, source)
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "nltk_data")])
    forbidden = getattr(nltk.pathsec, "_ip_is_forbidden", lambda ip: False)
    # NLTK's downloader refuses every address that is not globally routable; here it may reach the loopback server
    monkeypatch.setattr(nltk.pathsec, "_ip_is_forbidden", lambda ip: not ip.is_loopback and forbidden(ip),
                        raising=False)
    monkeypatch.setattr(nltk, "download", Downloader(nltk_index, str(tmp_path / "nltk_data")).download)
    for module in (clip_loading, scan_loading, vilbert_loading):
        monkeypatch.setattr(module, "_LOADED", LoadedModels())
    refuse_other_hosts(monkeypatch)
    HUB_PROBES.clear()  # what earlier tests found of the network (once per process in use)
    UNREACHABLE.clear()
    server.requests.clear()
    server.misbehaviour.clear()
    return server

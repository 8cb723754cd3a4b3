"""Transfers of original files that a user can trust: resumed, refused when truncated, of the wrong checksum or an
HTML page, clear about 403s and missing space, fetched once by two processes at once, never online when offline."""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, List

import pytest

from capeval import ModelNotAvailableError
from capeval.fetch import MIRROR_VARIABLE, OriginalUnavailableError, cache_root, converted_folder, fetch_model, \
    read_provenance
from capeval.models.scan.loading import model_folder as scan_folder
from capeval.originals import SOURCES
from capeval import transfers
from capeval.transfers import TransferError, drive_file_id, sha256_of
from fixtures.originals_server import Misbehaviour, OriginalsServer
from fixtures.paths import REPO_ROOT

SCAN = "capeval/tiger-scan-coco"
CHECKPOINT = "model_best.pth"


def set_checkpoint(monkeypatch: pytest.MonkeyPatch, **fields: object) -> None:
    """Change what the table says of SCAN's checkpoint."""
    source = SOURCES[SCAN]
    files = tuple(file._replace(**fields) if file.name == CHECKPOINT else file for file in source.files)
    monkeypatch.setitem(SOURCES, SCAN, source._replace(files=files))


def test_an_interrupted_transfer_resumes_where_it_stopped(online: OriginalsServer, stand_ins: Path) -> None:
    online.misbehaviour[CHECKPOINT] = Misbehaviour(drop_after=3000)
    folder = scan_folder(SCAN)
    assert online.requests_for(CHECKPOINT) == [None, "bytes=3000-"]
    original = read_provenance(folder)["originals"][0]
    assert (original["name"], original["sha256"], original["sha256_checked"]) == (
        CHECKPOINT, sha256_of(stand_ins / CHECKPOINT), True)


def test_a_part_left_by_an_earlier_run_is_resumed(online: OriginalsServer, stand_ins: Path) -> None:
    downloads = cache_root() / "downloads" / SCAN.replace("/", "--")
    downloads.mkdir(parents=True)
    (downloads / f"{CHECKPOINT}.part").write_bytes((stand_ins / CHECKPOINT).read_bytes()[:1234])
    scan_folder(SCAN)
    assert online.requests_for(CHECKPOINT) == ["bytes=1234-"]
    assert not downloads.exists()


def test_a_transfer_broken_every_time_keeps_its_part_and_says_to_rerun(online: OriginalsServer,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("capeval.transfers.ATTEMPTS", 2)
    online.misbehaviour[CHECKPOINT] = Misbehaviour(drop_after=1000, drops=2)
    with pytest.raises(OriginalUnavailableError, match=r"ended after 2,000 of [\d,]+ bytes; 2 attempts failed\. Run "
                                                       r"the same command again to resume \(the part is kept in "):
        fetch_model(SCAN, progress=False)
    part = cache_root() / "downloads" / SCAN.replace("/", "--") / f"{CHECKPOINT}.part"
    assert part.stat().st_size == 2000 and not converted_folder(SCAN).exists()
    assert online.requests_for(CHECKPOINT) == [None, "bytes=1000-"]
    scan_folder(SCAN)
    assert online.requests_for(CHECKPOINT) == [None, "bytes=1000-", "bytes=2000-"]


def test_a_truncated_file_is_refused(online: OriginalsServer, stand_ins: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    size = (stand_ins / CHECKPOINT).stat().st_size
    set_checkpoint(monkeypatch, size=size + 100)
    with pytest.raises(OriginalUnavailableError) as raised:
        scan_folder(SCAN)
    message = str(raised.value)
    assert f"gave {size:,} bytes, but the file has {size + 100:,}: a truncated or different file" in message
    assert message.startswith(f"model {SCAN!r}: its original file {CHECKPOINT}")
    assert f"{online.url}/{CHECKPOINT}" in message and f"capeval download {SCAN} --original FILE" in message
    assert not converted_folder(SCAN).exists()


def test_a_wrong_checksum_is_refused_and_the_file_removed(online: OriginalsServer, stand_ins: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    set_checkpoint(monkeypatch, sha256="0" * 64)
    with pytest.raises(OriginalUnavailableError, match=f"has sha256 {sha256_of(stand_ins / CHECKPOINT)}, not the "
                                                       f"{'0' * 64} of {CHECKPOINT}"):
        scan_folder(SCAN)
    assert not (cache_root() / "downloads" / SCAN.replace("/", "--") / CHECKPOINT).exists()
    assert not converted_folder(SCAN).exists()


def test_an_html_page_in_place_of_the_file_is_refused(online: OriginalsServer) -> None:
    online.misbehaviour[CHECKPOINT] = Misbehaviour(html=True)
    with pytest.raises(OriginalUnavailableError, match=r"answered with an HTML page \('Google Drive - Virus scan "
                                                       r"warning'\), not the file"):
        scan_folder(SCAN)
    assert not converted_folder(SCAN).exists()


def test_a_403_on_pacspp_says_why_and_what_to_do(online: OriginalsServer) -> None:
    online.misbehaviour["PAC++_clip_ViT-B-32.pth"] = Misbehaviour(status=403)
    with pytest.raises(OriginalUnavailableError) as raised:
        fetch_model("capeval/pacspp-clip-vit-b-32", progress=False)
    message = str(raised.value)
    assert f"{online.url}/PAC++_clip_ViT-B-32.pth answered 403 Forbidden" in message
    assert "have answered 403 Forbidden since early 2026 (aimagelab/pacscore issues 7 and 8)" in message
    assert "`capeval download capeval/pacspp-clip-vit-b-32 --original PATH`" in message
    assert "https://ailb-web.ing.unimore.it/publicfiles/pac++/PAC++_clip_ViT-B-32.pth" in message


def test_too_little_disk_space_is_said_before_the_transfer(online: OriginalsServer,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("capeval.transfers.shutil.disk_usage", lambda path: SimpleNamespace(free=10))
    with pytest.raises(OriginalUnavailableError, match=r"needs about [\d,]+ bytes in .* but its disk has 10 free"):
        scan_folder(SCAN)
    assert online.requests_for(CHECKPOINT) == []


def test_a_disk_that_fills_during_the_transfer_is_said(online: OriginalsServer,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    class FullDisk:
        """A file whose writes fail as on a full disk."""

        def __init__(self, path: Path, mode: str) -> None:
            self.handle = open(path, mode)

        def __enter__(self) -> "FullDisk":
            return self

        def __exit__(self, *exception: object) -> None:
            self.handle.close()

        def seek(self, offset: int) -> None:
            self.handle.seek(offset)

        def truncate(self) -> None:
            self.handle.truncate()

        def write(self, block: bytes) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(transfers, "open", FullDisk, raising=False)
    full = r"the disk is full while writing .*model_best\.pth\.part \([\d,]+ bytes free\): free some space"
    with pytest.raises(OriginalUnavailableError, match=full):
        scan_folder(SCAN)


@pytest.mark.parametrize("switch", ["HF_HUB_OFFLINE", "CAPEVAL_OFFLINE"])
def test_offline_nothing_is_fetched_and_the_error_names_the_command(switch: str, online: OriginalsServer,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    go_offline: Callable[[], None]) -> None:
    if switch == "HF_HUB_OFFLINE":
        go_offline()
    else:
        monkeypatch.setenv("CAPEVAL_OFFLINE", "1")
    with pytest.raises(ModelNotAvailableError) as raised:
        scan_folder(SCAN)
    assert f"On a machine with network access and the same cache (HF_HOME or CAPEVAL_CACHE), run `capeval " \
           f"download {SCAN}`" in str(raised.value)
    assert online.requests == []  # neither the hub nor the originals' host


def test_drive_files_are_found_by_name_in_the_shared_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    """The PAC-S README links both checkpoints to one Drive file: each is found by its own name in the folder."""
    listing = {"clip_ViT-B-32.pth": "id-b32", "openClip_ViT-L-14.pth": "id-l14", "runs/coco_scan/log/model_best.pth":
               "id-scan", "runs/f30k_scan/log/model_best.pth": "id-f30k"}
    for model, expected in (("capeval/pacs-clip-vit-b-32", "id-b32"), ("capeval/pacs-openclip-vit-l-14", "id-l14"),
                            (SCAN, "id-scan")):
        file = SOURCES[model].files[0]
        assert drive_file_id(listing, file.drive_path, file.url) == expected
    with pytest.raises(TransferError, match="several files are called model_best.pth"):
        drive_file_id(listing, "model_best.pth", "folder")
    with pytest.raises(TransferError, match="no file is called x.pth in the Google Drive folder folder"):
        drive_file_id(listing, "x.pth", "folder")


def test_without_gdown_a_drive_original_says_how_to_get_it(online: OriginalsServer,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MIRROR_VARIABLE)
    monkeypatch.setitem(sys.modules, "gdown", None)
    with pytest.raises(OriginalUnavailableError) as raised:
        fetch_model("capeval/pacs-clip-vit-b-32", progress=False)
    message = str(raised.value)
    assert "need the gdown package: pip install 'capeval[gdrive]'" in message
    assert "clip_ViT-B-32.pth from https://drive.google.com/drive/folders/15Da_nh7CYv8xfryIdETG6dPFSqcBiqpd (the " \
           "file clip_ViT-B-32.pth in that Google Drive folder)" in message


def test_two_processes_fetch_one_model_once(online: OriginalsServer, tmp_path: Path) -> None:
    """The first process holds the checkpoint's transfer open until the second says it waits for it; then both load
    the one folder, and the checkpoint was sent once."""
    release = threading.Event()
    online.misbehaviour[CHECKPOINT] = Misbehaviour(hold=release)
    described = {file.name: {"size": file.size, "sha256": file.sha256} for file in SOURCES[SCAN].files}
    code = ("import json, sys; from capeval.originals import SOURCES; from capeval.hub import resolve_model_folder; "
            f"model = {SCAN!r}; described = json.loads(sys.argv[1]); SOURCES[model] = SOURCES[model]._replace(files="
            "tuple(file._replace(**described[file.name]) for file in SOURCES[model].files)); "
            "print(resolve_model_folder(model, None, ['*'], 'conversion/convert_scan.py'))")
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_OFFLINE": "0", "HF_ENDPOINT": online.url,
           MIRROR_VARIABLE: online.url, "PYTHONPATH": str(REPO_ROOT)}
    processes = [subprocess.Popen([sys.executable, "-c", code, json.dumps(described)], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
    errors: List[List[str]] = [[], []]
    readers = [threading.Thread(target=lambda out, lines: lines.extend(out), args=(process.stderr, lines), daemon=True)
               for process, lines in zip(processes, errors)]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + 240
    while not any("waiting for another process that is fetching" in line for lines in errors for line in lines):
        assert time.monotonic() < deadline and all(process.poll() is None for process in processes), errors
        time.sleep(0.2)
    assert online.requests_for(CHECKPOINT) == [None]  # the first process is inside the transfer
    release.set()
    outputs = [process.communicate(timeout=240)[0] for process in processes]
    assert [process.returncode for process in processes] == [0, 0], errors
    assert [out.strip() for out in outputs] == [str(converted_folder(SCAN))] * 2
    assert online.requests_for(CHECKPOINT) == [None]

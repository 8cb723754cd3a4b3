"""Checks that an output path can be written, made before any scoring so that a bad path costs no model work."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from capeval.inputs import InputError


def check_output_file(path: Path) -> None:
    """``path`` must be a file that can be created or replaced: not a folder, in an existing writable folder."""
    if path.is_dir():
        raise InputError(f"output {path} is a folder; give a file name, e.g. {path / 'scores.json'}")
    if not path.parent.is_dir():
        raise InputError(f"output folder not found: {path.parent}")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise InputError(f"output {path} is not writable")
        return
    _check_writable_folder(path.parent, f"output {path}")


def check_output_folder(path: Path) -> None:
    """``path`` must be a folder that exists or can be created, and that files can be written in; it is created."""
    if path.exists() and not path.is_dir():
        raise InputError(f"output {path} is a file; give a folder for the report files")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(f"output folder {path} cannot be created: {error.strerror or error}") from None
    _check_writable_folder(path, f"output folder {path}")


def _check_writable_folder(folder: Path, what: str) -> None:
    """Create and remove a temporary file in ``folder`` (permission bits alone miss read-only file systems)."""
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".capeval-write-check-"):
            pass
    except OSError as error:
        raise InputError(f"{what} cannot be written: {error.strerror or error}") from None

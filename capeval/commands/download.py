"""``capeval download``: fetch models ahead of time (for machines whose compute nodes have no network), each as a
scorer would on first use: the hub repository, else the authors' original files, checked and converted into
capeval's cache (a cached folder whose weights no longer match their recorded sha256 is built again). Prints what
it fetched, the sizes and sha256 of the originals, and where each folder is. Every run
first installs capeval's ``evaluate`` modules into evaluate's module cache (no network needed), so that
``evaluate.load("capeval/<name>")`` works offline; ``--modules-only`` does that alone."""
from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, List

from capeval.commands.arguments import set_handler
from capeval.originals import SOURCES, human_size
from capeval.registry import MODELS


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``download`` subcommand to the capeval command's subparsers."""
    parser = subparsers.add_parser(
        "download", help="fetch models ahead of time (hub repository, or the authors' original files converted)",
        description="Fetch each MODEL as its first use would: a converted folder in capeval's cache, else the hub "
                    "repository at capeval's pinned revision, else the authors' original files, downloaded, checked "
                    "and converted into capeval's cache ($CAPEVAL_CACHE, else $HF_HOME/capeval); a cached folder "
                    "whose weights no longer match their recorded sha256 is built again. Run it where there "
                    "is network access; afterwards the models load with HF_HUB_OFFLINE=1. Every run also installs "
                    "capeval's evaluate modules into evaluate's module cache ($HF_MODULES_CACHE, else "
                    '$HF_HOME/modules), so that evaluate.load("capeval/<name>") works offline.',
        epilog=f"Models: {', '.join(SOURCES)}. CAPEVAL_ORIGINALS_MIRROR=<mirror> takes every original file from "
               "<mirror>/<file name>, the mirror being a folder on this machine (read even with HF_HUB_OFFLINE=1), a "
               "file:// URL or an http(s):// base URL.")
    parser.add_argument("models", nargs="*", metavar="MODEL", help="registry model names (see below)")
    parser.add_argument("--all", action="store_true", help="every published model")
    parser.add_argument("--modules-only", action="store_true",
                        help="only install the evaluate modules (capeval/<name> for every metric family); the models "
                             "are then fetched on first use")
    parser.add_argument("--original", nargs="+", type=Path, default=[], metavar="FILE",
                        help="original files obtained by hand (named as the authors name them), for one MODEL: "
                             "checked and converted instead of downloaded")
    set_handler(parser, run)
    return parser


def _chosen_models(args: argparse.Namespace) -> List[str]:
    """The models asked for (none with --modules-only); refuses unknown names, none, and --original with other than
    one model."""
    from capeval.inputs import InputError

    if args.modules_only:
        if args.models or args.all or args.original:
            raise InputError("--modules-only installs the evaluate modules alone: give no MODEL, --all or --original")
        return []
    if args.all and args.models:
        raise InputError("give MODEL names or --all, not both")
    models = [name for name, source in SOURCES.items() if source.published] if args.all else list(args.models)
    if not models:
        raise InputError("name the models to download, give --all, or --modules-only for the evaluate modules alone")
    unknown = [name for name in models if name not in SOURCES]
    if unknown:
        raise InputError(f"unknown model {', '.join(unknown)}; capeval's models: {', '.join(SOURCES)}")
    if args.original and len(models) != 1:
        raise InputError("--original takes the files of one MODEL")
    return models


def _given_originals(model: str, files: List[Path]) -> Dict[str, Path]:
    """``{original file name: path}`` of the files given with --original (matched by file name)."""
    from capeval.inputs import InputError

    names = {file.name for file in SOURCES[model].files}
    given = {}
    for path in files:
        if path.name not in names:
            raise InputError(f"--original {path}: {model}'s original files are called {', '.join(sorted(names))}")
        if not path.is_file():
            raise InputError(f"--original {path}: no such file")
        given[path.name] = path
    return given


def describe(model: str, folder: Path, already: bool) -> List[str]:
    """Lines saying where ``model``'s folder is and what it was made from."""
    from capeval.fetch import read_provenance

    provenance = read_provenance(folder)
    if provenance is None:
        files = [path for path in folder.iterdir() if path.is_file()]
        total = sum(path.stat().st_size for path in files)
        revision = MODELS[model].revision if model in MODELS else None
        return [f"{model}: from the Hugging Face hub (revision {revision or 'main'}): {len(files)} files, "
                f"{human_size(total)}, in {folder}"]
    when = "already in the cache" if already else "fetched"
    lines = [f"{model}: {when}, converted by capeval {provenance['capeval']} from its original files, in {folder}"]
    for original in provenance["originals"]:
        checked = "checked against capeval's record" if original["sha256_checked"] else "recorded"
        lines.append(f"  {original['name']}: {original['size']:,} bytes, sha256 {original['sha256']} ({checked}), "
                     f"from {original['url']}")
    return lines


def fetch_one(model: str, originals: Dict[str, Path], rebuild: bool = False) -> Path:
    """The folder of ``model``, fetched (or converted from ``originals``) now if need be; built again from its
    original files with ``rebuild`` (a cached folder whose weights are damaged)."""
    from capeval import fetch

    if originals or rebuild:
        return fetch.fetch_model(model, originals)
    module, function = SOURCES[model].folder.split(":")
    return getattr(importlib.import_module(module), function)(model)


def install_evaluate_modules() -> bool:
    """Install the evaluate modules, print where, and warn when the current folder holds a local script that
    ``evaluate.load("capeval/<name>")`` would load instead; returns whether they were installed."""
    from capeval.integrations.module_cache import ModuleInstallError, hub_id, install_modules, shadowing_scripts

    try:
        installed = install_modules()
    except ModuleInstallError as error:
        print(f"capeval download: error: {' '.join(str(error).split())}", file=sys.stderr)
        return False
    folder = next(iter(installed.values())).parents[2]
    print(f"evaluate modules {', '.join(hub_id(family) for family in installed)}: installed in {folder} "
          '(evaluate.load("capeval/<name>") finds them with no network)', flush=True)
    for script in shadowing_scripts(Path.cwd()):
        warnings.warn(f'in this folder ({Path.cwd()}), evaluate.load("{hub_id(script.stem)}") loads the local file '
                      f"{hub_id(script.stem)}/{script.name} (evaluate takes a local path first), not capeval's "
                      "installed module: run Python from another folder to use the installed module")
    return True


def run(args: argparse.Namespace) -> int:
    """Handler of ``capeval download``: the evaluate modules are installed and every model is tried; returns 2 when
    the modules or a model could not be had."""
    from capeval.fetch import MIRROR_VARIABLE, cached_model, local_mirror, nltk_data, offline
    from capeval.hub import ModelNotAvailableError, weights_problem

    models = _chosen_models(args)
    if offline() and models:
        mirror = f" or built from the original files in {MIRROR_VARIABLE}'s folder" if local_mirror() else ""
        warnings.warn("HF_HUB_OFFLINE or CAPEVAL_OFFLINE is set: nothing is downloaded, only models already in the "
                      f"caches are found{mirror}")
    given = _given_originals(models[0], args.original) if args.original else {}
    modules_installed = install_evaluate_modules()
    failed = []
    for model in models:
        cached = None if given else cached_model(model)
        damaged = cached is not None and weights_problem(cached) is not None
        already = cached is not None and not damaged
        try:
            folder = fetch_one(model, given, rebuild=damaged)
        except ModelNotAvailableError as error:
            print(f"capeval download: error: {' '.join(str(error).split())}", file=sys.stderr)
            failed.append(model)
            continue
        lines = describe(model, folder, already)
        try:
            lines += [f"  NLTK data {package}: {nltk_data(package, model)}" for package in SOURCES[model].nltk_data]
        except ModelNotAvailableError as error:
            print(f"capeval download: error: {' '.join(str(error).split())}", file=sys.stderr)
            failed.append(model)
        print("\n".join(lines), flush=True)
    if failed:
        print(f"capeval download: {len(failed)} of {len(models)} models could not be had: {', '.join(failed)}",
              file=sys.stderr)
    return 0 if modules_installed and not failed else 2

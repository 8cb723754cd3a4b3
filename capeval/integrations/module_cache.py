"""capeval's ``evaluate`` modules, installed where evaluate keeps the modules it downloads from the hub, so that
``evaluate.load("capeval/<name>")`` works with no network and before the Spaces are published.

The modules ship with the package: ``capeval/integrations/metrics/<family>/`` (``<family>.py``, the metric card, the
Space's ``app.py`` and ``requirements.txt``; the repository's ``metrics/`` folder links there). evaluate resolves a
hub id ``capeval/<name>`` in this order: the local script ``./capeval/<name>/<name>.py`` when that file exists in
the current folder; the Space ``capeval/<name>``, whose ``<name>.py`` it copies to
``$HF_MODULES_CACHE/evaluate_modules/metrics/capeval--<name>/<hash of the script>/<name>.py``; else (offline, or no
such Space) the most recently modified copy in that folder. :func:`install_modules` makes that copy with evaluate's
own functions, as evaluate does with a downloaded script, then checks that evaluate's lookup of cached modules finds
it. ``HF_MODULES_CACHE`` defaults to ``$HF_HOME/modules``, read by evaluate when it is imported.
"""
from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from types import ModuleType
from typing import Dict, Iterator, List, Optional

from capeval.registry import FAMILIES

MODULES_FOLDER = Path(__file__).resolve().parent / "metrics"
"""The folder of the metric modules, one subfolder per family."""

NAMESPACE = "capeval"
"""The hub namespace of the modules: ``evaluate.load("capeval/<family>")``."""

TESTED_EVALUATE_VERSION = "0.4.6"
"""The evaluate release whose module cache :func:`install_modules` was tested against
(``tests/integrations/test_installed_modules.py``)."""


class ModuleInstallError(RuntimeError):
    """evaluate's module cache is not laid out as capeval expects (another evaluate release); the message names the
    installed and the tested evaluate versions and how to load a module from its folder instead."""


def module_script(family: str) -> Path:
    """The ``evaluate`` script of ``family``, as shipped with the package."""
    return MODULES_FOLDER / family / f"{family}.py"


def hub_id(family: str) -> str:
    """``capeval/<family>``, the id ``evaluate.load`` takes."""
    return f"{NAMESPACE}/{family}"


@contextlib.contextmanager
def _quiet(logger_name: str) -> Iterator[None]:
    """Hide the warnings of ``logger_name``: evaluate's lookup of a cached module warns that it uses the cache."""
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _layout_error(problem: str, family: str) -> ModuleInstallError:
    import evaluate

    return ModuleInstallError(
        f"capeval cannot install its evaluate module {hub_id(family)} into evaluate {evaluate.__version__}'s module "
        f"cache ({problem}); capeval's installer was tested with evaluate {TESTED_EVALUATE_VERSION}. Install that "
        f"evaluate release, or load the module from its folder: evaluate.load({str(module_script(family).parent)!r})")


def _install(loading: ModuleType, family: str, cache: Optional[Path]) -> Path:
    """Copy one module into evaluate's cache as evaluate copies a script it downloaded (``HubEvaluationModuleFactory``
    of evaluate 0.4.6); returns the installed script, checked to be the copy evaluate's cache lookup imports."""
    script = module_script(family)
    dynamic_modules = loading.init_dynamic_modules(hf_modules_cache=cache)
    imports = loading.get_imports(str(script))
    local_imports = loading._download_additional_modules(name=family, base_path=str(script.parent), imports=imports,
                                                         download_config=loading.DownloadConfig())
    module_path, digest = loading._create_importable_file(
        local_path=str(script), local_imports=local_imports, additional_files=[], dynamic_modules_path=dynamic_modules,
        module_namespace="metrics", name=hub_id(family), download_mode=loading.DownloadMode.REUSE_DATASET_IF_EXISTS)
    installed = Path(dynamic_modules, "metrics", hub_id(family).replace("/", "--"), digest, script.name)
    if not installed.is_file() or installed.read_bytes() != script.read_bytes():
        raise _layout_error(f"the script is not at {installed}", family)
    # evaluate imports the most recently modified copy: make it this one, also after a copy of another capeval version
    others = [path.stat().st_mtime for path in installed.parent.parent.glob(f"*/{script.name}")
              if path.parent != installed.parent]
    stamp = max([time.time(), *(mtime + 1 for mtime in others)])
    os.utime(installed, (stamp, stamp))
    try:
        with _quiet(loading.__name__):
            found = loading.CachedEvaluationModuleFactory(hub_id(family).replace("/", "--"),
                                                          dynamic_modules_path=dynamic_modules).get_module().module_path
    except FileNotFoundError as error:  # evaluate looks for cached modules elsewhere
        found = str(error)
    if found != module_path:
        raise _layout_error(f"its lookup of cached modules finds {found}, not {module_path}", family)
    return installed


def install_modules(cache: Optional[Path] = None) -> Dict[str, Path]:
    """Install every family's module into evaluate's module cache (``cache``, default evaluate's ``HF_MODULES_CACHE``:
    ``$HF_MODULES_CACHE``, else ``$HF_HOME/modules``, as read when evaluate was imported); returns ``{family: installed
    script}``. Installing again changes nothing but makes these copies the ones evaluate imports; no network is used.
    Raises :class:`ModuleInstallError` when evaluate's cache is laid out otherwise."""
    from evaluate import loading

    installed = {}
    for family in FAMILIES:
        try:
            installed[family] = _install(loading, family, cache)
        except (AttributeError, TypeError) as error:  # evaluate's functions renamed or their arguments changed
            raise _layout_error(f"{type(error).__name__}: {error}", family) from None
    return installed


def shadowing_scripts(folder: Path) -> List[Path]:
    """The local scripts that ``evaluate.load("capeval/<name>")`` run in ``folder`` loads instead of the installed
    modules: evaluate takes ``capeval/<name>`` as a local path when ``capeval/<name>/<name>.py`` exists there."""
    return [path for path in (Path(folder) / hub_id(family) / f"{family}.py" for family in FAMILIES) if path.is_file()]

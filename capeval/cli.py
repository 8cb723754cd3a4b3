"""The ``capeval`` command: its parser and :func:`main`. The subcommands (``score``, ``benchmark``, ``regions``,
``train``, ``download``) live in :mod:`capeval.commands`, one module each.
"""
from __future__ import annotations

import argparse
import sys
import warnings
from contextlib import contextmanager
from typing import Any, Iterator, Optional, Sequence

from capeval.benchmarks.baselines import BaselineUnavailableError
from capeval.benchmarks.datasets import BenchmarkFormatError
from capeval.commands import benchmark, download, regions, score, train
from capeval.commands.arguments import in_flags
from capeval.configuration import ConfigError
from capeval.inputs import InputError
from capeval.version import __version__


def build_parser() -> argparse.ArgumentParser:
    """The ``capeval`` argument parser with its subcommands."""
    parser = argparse.ArgumentParser(prog="capeval", description="Faithful caption evaluation metrics for images and videos.")
    parser.add_argument("--version", action="version", version=f"capeval {__version__}")
    parser.add_argument("--verbose", action="store_true",
                        help="also show huggingface_hub's download progress bars and its log (retries, warnings); "
                             "model loading from disk shows no bar")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in (score, benchmark, regions, train, download):
        command.register(subparsers)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; bad input, a missing file or an unreadable model config prints one line to stderr and
    returns 2; Ctrl-C prints one line and returns 130.

    Warnings print as one line each (``capeval score: warning: ...``), without source locations.
    """
    args = build_parser().parse_args(argv)
    prefix = f"capeval {args.command}"

    def show_warning(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        print(f"{prefix}: warning: {' '.join(str(message).split())}", file=sys.stderr)

    group_before = _process_group_initialized()
    try:
        with warnings.catch_warnings(), _third_party_bars(shown=args.verbose or args.command == "download"), \
                _hub_log(shown=args.verbose):
            warnings.showwarning = show_warning
            return args.handler(args)
    except (InputError, ConfigError, BenchmarkFormatError, BaselineUnavailableError, OSError) as error:
        message = " ".join(str(error).split())
        print(f"{prefix}: error: {in_flags(message, args.command_parser)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prefix}: interrupted", file=sys.stderr)
        return 130
    finally:
        if not group_before and _process_group_initialized():
            _leave_process_group()


def _process_group_initialized() -> bool:
    """Whether this process is in a torch.distributed process group (without importing torch)."""
    distributed = sys.modules.get("torch.distributed")
    return distributed is not None and distributed.is_available() and distributed.is_initialized()


def _leave_process_group() -> None:
    """Destroy the process group that the command joined (under ``accelerate launch``), so that every process exits
    cleanly: a gloo group left to the interpreter's exit can abort it. A failure here is only warned about."""
    import torch.distributed

    try:
        torch.distributed.destroy_process_group()
    except Exception as error:  # the command's own result or error matters more
        print(f"capeval: warning: could not leave the process group ({error})", file=sys.stderr)


@contextmanager
def _hub_log(shown: bool) -> Iterator[None]:
    """huggingface_hub's log (its "Retrying in 1s [Retry 1/5]" lines, warnings) kept to errors unless ``shown``;
    its previous level restored afterwards."""
    if shown:
        yield
        return
    from huggingface_hub.utils import logging as hub_logging

    level = hub_logging.get_verbosity()
    hub_logging.set_verbosity_error()
    try:
        yield
    finally:
        hub_logging.set_verbosity(level)


@contextmanager
def _third_party_bars(shown: bool) -> Iterator[None]:
    """Hide huggingface_hub's and transformers' progress bars (downloads, "Loading weights") unless ``shown``;
    their previous setting is restored afterwards."""
    if shown:
        yield
        return
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    hub_was_enabled = not are_progress_bars_disabled()
    transformers_logging = sys.modules.get("transformers.utils.logging")
    transformers_was_enabled = (transformers_logging.is_progress_bar_enabled() if transformers_logging is not None
                                else hub_was_enabled)  # transformers reads the hub's setting when first imported
    disable_progress_bars()
    if transformers_logging is not None:
        transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if hub_was_enabled:
            enable_progress_bars()
        transformers_logging = sys.modules.get("transformers.utils.logging")
        if transformers_logging is not None and transformers_was_enabled:
            transformers_logging.enable_progress_bar()


if __name__ == "__main__":
    sys.exit(main())

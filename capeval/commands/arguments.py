"""What several subcommands share: argument types, help text generated from the metric registry, and the API's
errors said in the flags of a command line (:func:`in_flags`)."""
from __future__ import annotations

import argparse
import ast
import re
import shlex
from typing import Callable, Iterable, List

from capeval.registry import FAMILIES, MetricFamily

KEYWORD_VALUE = re.compile(
    r"(?<![\w./\\-])(?P<keyword>[a-z][a-z_]*)="
    r"(?P<value>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|<[^<>]*>|\[\[\.\.\.\], \.\.\.\]|\[\.\.\.\]|[\w.+-]+)?")
"""How the API's errors name a parameter: ``keyword=`` and a value, which is a Python literal (``'hub'``,
``'/data'``, ``4``), a placeholder (``<local folder>``) or a list placeholder (``[...]``, ``[[...], ...]``)."""


def in_flags(message: str, parser: argparse.ArgumentParser) -> str:
    """An API error message as the command line of ``parser`` says it: each ``keyword=value`` (:data:`KEYWORD_VALUE`)
    whose keyword is the ``dest`` of one of its options becomes that option as typed: ``--data-root /data``,
    ``--model <local folder>``, ``--references FILE`` (a list placeholder becomes the option's metavar), ``--arch
    openai``. The options' ``dest`` are the API's keywords, so their definitions are the one table of the two names."""
    options = {action.dest: action for action in parser._actions if action.option_strings}

    def flag(match: "re.Match[str]") -> str:
        action = options.get(match["keyword"])
        if action is None:
            return match[0]
        value = match["value"] or ""
        if action.nargs == 0:  # a switch: its flag alone
            return action.option_strings[0]
        if value.startswith(("'", '"')):
            value = shlex.quote(str(ast.literal_eval(value)))
        elif not value or value.startswith("["):
            value = action.metavar or ("" if action.choices else action.dest.upper())
        return f"{action.option_strings[0]} {value}".rstrip()

    return KEYWORD_VALUE.sub(flag, message)


def set_handler(parser: argparse.ArgumentParser, handler: Callable[[argparse.Namespace], int]) -> None:
    """Make ``handler`` run the (sub)command of ``parser``, whose flags then name the API's keywords in its errors
    (``args.command_parser``, read by :func:`in_flags`)."""
    parser.set_defaults(handler=handler, command_parser=parser)


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a finite number above 0."""
    value = float(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number above 0, got {text}")
    return value


def family_label(family: MetricFamily) -> str:
    """A family's scores as its description names them, before the citation: ``CLIP-S / RefCLIP-S``."""
    return family.description.split(" (", 1)[0]


def region_families() -> List[MetricFamily]:
    """The families whose scorers read image regions (precomputed region features can stand in for the images)."""
    return [family for family in FAMILIES.values() if family.region_features]


def video_families() -> List[MetricFamily]:
    """The families whose scorers score videos (``capeval score --videos``)."""
    return [family for family in FAMILIES.values() if "videos" in family.entries]


def option_families(option: str) -> List[MetricFamily]:
    """The families whose scorers take ``option`` beyond the common ones (``num_frames``: EMScore)."""
    return [family for family in FAMILIES.values() if option in family.extra_options]


def detector_users(detector: str) -> List[str]:
    """The labels of the families whose regions ``detector`` (a ``DETECTORS`` name) makes: ``["TIGEr"]``."""
    return [family.label for family in region_families() if family.detector == detector]


def listed(names: Iterable[str], last: str = "or") -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {last} {names[-1]}"

"""Classic caption metrics (BLEU-1..4, METEOR, ROUGE-L, CIDEr, SPICE) exactly as the CLIPScore / PAC-S evaluations
compute them with pycocoevalcap 1.2.

Protocol (aimagelab/pacscore ``compute_correlations.py``, jmhessel/clipscore ``generation_eval_utils.py``): every
candidate and reference goes through the Stanford PTB tokenizer (``-preserveLines -lowerCase``, punctuation tokens
removed); all items of a benchmark are scored in ONE call with one entry per item (so CIDEr's document
frequencies and its ``log N`` come from the whole flattened item list, duplicates included); the per-item scores
are used. Here texts are whitespace-normalised first (the reference scripts do so for their benchmarks; it also keeps
line separators such as U+2028 from splitting a caption in two inside the tokenizer). Each distinct text is tokenised
once, and metrics whose per-item value depends on that item alone (BLEU, METEOR, ROUGE-L, SPICE) score each distinct
(candidate, references) combination once.
"""
from __future__ import annotations

import contextlib
import io
from collections import Counter
import os
import shutil
import subprocess
import threading
from typing import Any, Dict, Hashable, List, Optional, Sequence, Tuple

from ..inputs import InputError

BASELINE_NAMES = ("BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "METEOR", "ROUGE-L", "CIDEr", "SPICE")
"""Every baseline this module computes."""

DEFAULT_BASELINES = ("BLEU-1", "BLEU-4", "METEOR", "ROUGE-L", "CIDEr")
"""The baselines the PAC-S reference README reports (SPICE is left out there too)."""

_JAVA_HELP = (
    "pycocoevalcap's PTB tokenizer, METEOR and SPICE run on Java: install a Java runtime (e.g. "
    "`apt-get install -y default-jre-headless`) so that `java` is on PATH."
)


class BaselineUnavailableError(RuntimeError):
    """A baseline cannot run here (no Java, SPICE's CoreNLP jars missing); the message says how to fix it."""


def canonical_baseline_name(name: str) -> str:
    """The spelling in :data:`BASELINE_NAMES` of a name given in any case, with or without ``-`` / ``_``
    (``"rouge_l"``, ``"bleu4"``, ``"Cider"``)."""
    folded = name.lower().replace("-", "").replace("_", "")
    for known in BASELINE_NAMES:
        if known.lower().replace("-", "") == folded:
            return known
    raise ValueError(f"unknown baseline {name!r}; available: {', '.join(BASELINE_NAMES)}")


def _pycocoevalcap_dir() -> str:
    try:
        import pycocoevalcap
    except ImportError:
        raise BaselineUnavailableError(
            "the classic baselines need pycocoevalcap 1.2: pip install 'capeval[benchmarks]' (or pycocoevalcap==1.2)"
        ) from None
    return os.path.abspath(list(pycocoevalcap.__path__)[0])  # a namespace package: no __file__


def _require_java() -> None:
    if shutil.which("java") is None:
        raise BaselineUnavailableError(f"`java` was not found. {_JAVA_HELP}")


def spice_missing_files() -> List[str]:
    """The Stanford CoreNLP 3.6.0 jars SPICE needs that are not installed (an empty list when SPICE can run)."""
    library = os.path.join(_pycocoevalcap_dir(), "spice", "lib")
    wanted = ("stanford-corenlp-3.6.0.jar", "stanford-corenlp-3.6.0-models.jar")
    return [os.path.join(library, name) for name in wanted if not os.path.isfile(os.path.join(library, name))]


def _require_spice() -> None:
    missing = spice_missing_files()
    if missing:
        raise BaselineUnavailableError(
            "SPICE needs the Stanford CoreNLP 3.6.0 jars, which pycocoevalcap downloads from nlp.stanford.edu on "
            f"first use; they are missing ({', '.join(missing)}) and capeval does not download them. With internet "
            "access run `python -c 'from pycocoevalcap.spice.get_stanford_models import get_stanford_models; "
            "get_stanford_models()'`, or copy stanford-corenlp-3.6.0.jar and stanford-corenlp-3.6.0-models.jar "
            "(from stanford-corenlp-full-2015-12-09.zip) to that folder. SPICE 1.0 also needs Java 8 or 11 (it "
            "fails on Java 17+)."
        )


def _validate(candidates: Sequence[str], references: Sequence[Sequence[str]]) -> None:
    if isinstance(candidates, str) or isinstance(references, str):
        raise InputError("candidates must be a list of strings and references a list of lists of strings")
    if len(candidates) != len(references):
        raise InputError(f"got {len(candidates)} candidates but {len(references)} reference lists")
    for index, candidate in enumerate(candidates):
        if not isinstance(candidate, str):
            raise InputError(f"candidates[{index}] is a {type(candidate).__name__}, not a string")
    for index, item_references in enumerate(references):
        if isinstance(item_references, str) or not isinstance(item_references, Sequence):
            raise InputError(f"references[{index}] must be a list of strings")
        if len(item_references) == 0:
            raise InputError(f"references[{index}] is empty: the classic baselines need at least one reference")
        for position, reference in enumerate(item_references):
            if not isinstance(reference, str):
                raise InputError(f"references[{index}][{position}] is a {type(reference).__name__}, not a string")


def ptb_tokenize(texts: Sequence[str]) -> List[str]:
    """PTB-tokenised, lower-cased, punctuation-stripped form of each text (one Java call for the distinct texts)."""
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputError(f"texts[{index}] is a {type(text).__name__}, not a string")
    _require_java()
    _pycocoevalcap_dir()
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    distinct = list(dict.fromkeys(" ".join(text.split()) for text in texts))
    if not distinct:
        return []
    tokenized = PTBTokenizer().tokenize({index: [{"caption": text}] for index, text in enumerate(distinct)})
    if len(tokenized) != len(distinct):
        raise RuntimeError(
            f"the PTB tokenizer returned {len(tokenized)} lines for {len(distinct)} texts (did java fail? {_JAVA_HELP})"
        )
    lookup = {text: tokenized[index][0] for index, text in enumerate(distinct)}
    return [lookup[" ".join(text.split())] for text in texts]


def _pycoco_scores(scorer: Any, gts: Dict[int, List[str]], res: Dict[int, List[str]]) -> Any:
    """Per-item scores of a pycocoevalcap scorer."""
    _, scores = scorer.compute_score(gts, res)
    return scores


def _cider_scores(combinations: Sequence[Tuple[str, Tuple[str, ...]]], item_combination: Sequence[int]) -> List[float]:
    """pycocoevalcap CIDEr-D of each distinct combination, document frequencies and ``log N`` taken over every item.

    The result equals ``Cider().compute_score`` on the full item list: the scorer holds the references of all N items
    (so ``compute_doc_freq`` and ``ref_len`` see the duplicates) while only the distinct combinations, placed first,
    carry a candidate, and ``compute_cider`` pairs candidates with references in order.
    """
    from pycocoevalcap.cider.cider_scorer import CiderScorer, cook_refs, cook_test

    scorer = CiderScorer(n=4, sigma=6.0)
    cooked_references = [cook_refs(list(item_references)) for _, item_references in combinations]
    scorer.ctest = [cook_test(candidate) for candidate, _ in combinations]
    repeats = Counter(item_combination)
    duplicates = [cooked_references[combination] for combination, count in repeats.items() for _ in range(count - 1)]
    scorer.crefs = cooked_references + duplicates
    scorer.compute_doc_freq()
    return [float(score) for score in scorer.compute_cider()]


class _Prepared:
    """Tokenised inputs: the distinct (candidate, references) combinations and each item's combination."""

    def __init__(self, candidates: Sequence[str], references: Sequence[Sequence[str]]) -> None:
        flat_references = [reference for item_references in references for reference in item_references]
        tokens = ptb_tokenize(list(candidates) + flat_references)
        position = len(candidates)
        combination_index: Dict[Hashable, int] = {}
        self.item_combination: List[int] = []
        for candidate, item_references in zip(tokens[: len(candidates)], references):
            tokenized_references = tuple(tokens[position : position + len(item_references)])
            position += len(item_references)
            self.item_combination.append(
                combination_index.setdefault((candidate, tokenized_references), len(combination_index))
            )
        self.combinations: List[Tuple[str, Tuple[str, ...]]] = list(combination_index)
        self.gts = {index: list(item_references) for index, (_, item_references) in enumerate(self.combinations)}
        self.res = {index: [candidate] for index, (candidate, _) in enumerate(self.combinations)}

    def per_item(self, per_combination: Sequence[float]) -> List[float]:
        return [per_combination[combination] for combination in self.item_combination]


def _score(prepared: _Prepared, wanted: Sequence[str], meteor: Optional["_Meteor"] = None) -> Dict[str, List[float]]:
    """Per-combination scores of the baselines in ``wanted``; METEOR runs in its process while Python does the rest."""
    per_combination: Dict[str, List[float]] = {}
    if "METEOR" in wanted:
        meteor = meteor if meteor is not None else _Meteor()
        meteor.start(prepared.gts, prepared.res)
    try:
        if any(name.startswith("BLEU") for name in wanted):
            from pycocoevalcap.bleu.bleu import Bleu

            with contextlib.redirect_stdout(io.StringIO()):  # Bleu prints its corpus statistics
                bleu = _pycoco_scores(Bleu(4), prepared.gts, prepared.res)
            for order in range(1, 5):
                per_combination[f"BLEU-{order}"] = [float(score) for score in bleu[order - 1]]
        if "ROUGE-L" in wanted:
            from pycocoevalcap.rouge.rouge import Rouge

            rouge = _pycoco_scores(Rouge(), prepared.gts, prepared.res)
            per_combination["ROUGE-L"] = [float(score) for score in rouge]
        if "CIDEr" in wanted:
            per_combination["CIDEr"] = _cider_scores(prepared.combinations, prepared.item_combination)
        if "SPICE" in wanted:
            from pycocoevalcap.spice.spice import Spice

            try:
                spice = _pycoco_scores(Spice(), prepared.gts, prepared.res)
            except subprocess.CalledProcessError as error:
                raise BaselineUnavailableError(
                    f"the SPICE java process failed (exit code {error.returncode}); SPICE 1.0 runs on Java 8 or 11, "
                    "not on Java 17+ (InaccessibleObjectException); its own error is printed above"
                ) from None
            per_combination["SPICE"] = [float(score["All"]["f"]) for score in spice]
        if meteor is not None:
            per_combination["METEOR"] = meteor.result()
    finally:
        if meteor is not None:
            meteor.close()
    return per_combination


def _check_environment(candidates: Sequence[str], references: Sequence[Sequence[str]], wanted: Sequence[str]) -> None:
    _validate(candidates, references)
    _require_java()
    if "SPICE" in wanted:
        _require_spice()


def compute_baselines(
    candidates: Sequence[str], references: Sequence[Sequence[str]], names: Sequence[str] = DEFAULT_BASELINES
) -> Dict[str, List[float]]:
    """Per-item scores of each baseline in ``names``, all items scored together after one tokenisation pass."""
    wanted = [canonical_baseline_name(name) for name in names]
    _check_environment(candidates, references, wanted)
    if not candidates:
        return {name: [] for name in wanted}
    meteor = _Meteor() if "METEOR" in wanted else None  # the JVM loads its paraphrase table while we tokenise
    try:
        prepared = _Prepared(candidates, references)
    except BaseException:
        if meteor is not None:
            meteor.close()
        raise
    per_combination = _score(prepared, wanted, meteor)
    return {name: prepared.per_item(per_combination[name]) for name in wanted}


class _Meteor:
    """pycocoevalcap's METEOR 1.5 process, scored in a background thread (the work happens in the JVM)."""

    def __init__(self) -> None:
        from pycocoevalcap.meteor.meteor import Meteor

        self._scorer = Meteor()
        self._thread: Optional[threading.Thread] = None
        self._scores: List[float] = []
        self._error: Optional[BaseException] = None

    def start(self, gts: Dict[int, List[str]], res: Dict[int, List[str]]) -> None:
        self._thread = threading.Thread(target=self._run, args=(gts, res), daemon=True)
        self._thread.start()

    def _run(self, gts: Dict[int, List[str]], res: Dict[int, List[str]]) -> None:
        try:
            self._scores = [float(score) for score in _pycoco_scores(self._scorer, gts, res)]
        except (ValueError, OSError) as error:  # an empty line from, or a broken pipe to, a dead java process
            process = self._scorer.meteor_p
            detail = ""
            if process.poll() is not None:
                stderr = process.stderr.read().decode(errors="replace").strip()
                detail = f" exit code {process.returncode}: {stderr[-500:]}"
            self._error = BaselineUnavailableError(f"the METEOR java process failed ({error!r};{detail}). {_JAVA_HELP}")
        except BaseException as error:  # re-raised in the calling thread
            self._error = error

    def result(self) -> List[float]:
        assert self._thread is not None, "start() first"
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._scores

    def close(self) -> None:
        """Stop the process. pycocoevalcap's compute_score keeps its lock when it fails and its ``__del__`` takes that
        lock, so the scorer gets a fresh one: garbage collection must never block on a dead scoring thread."""
        self._scorer.lock = threading.Lock()
        process = self._scorer.meteor_p
        if process.poll() is None:
            process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout, process.stderr):
            with contextlib.suppress(OSError):  # unsent input of a dead process: a broken pipe
                stream.close()


def baseline_scores(name: str, candidates: Sequence[str], references: Sequence[Sequence[str]]) -> List[float]:
    """Per-item scores of one baseline (see :func:`compute_baselines`)."""
    name = canonical_baseline_name(name)
    return compute_baselines(candidates, references, [name])[name]


class BaselineMetric:
    """A baseline as a benchmark metric: ``metric(images, candidates, references) -> list[float]`` (images ignored).

    Metrics of one group (:func:`baseline_metrics`, :data:`BASELINES`) tokenise given inputs once and keep every
    baseline computed on them, so calling several of them on one benchmark repeats no work.
    """

    needs_references = True
    needs_images = False

    def __init__(self, name: str, group: Optional["_BaselineGroup"] = None) -> None:
        self.name = canonical_baseline_name(name)
        self._group = group if group is not None else _BaselineGroup()

    def check(self, images: Optional[Sequence[Any]], candidates: Sequence[str], references: Sequence[Sequence[str]],
              keys: Sequence[str]) -> None:
        """Raise before any metric runs when this baseline cannot score the inputs: a reference list that is empty
        (:class:`InputError` naming the item), or no Java, pycocoevalcap or SPICE models
        (:class:`BaselineUnavailableError`)."""
        empty = next((index for index, item_references in enumerate(references) if not item_references), None)
        if empty is not None:
            raise InputError(f"item {keys[empty]!r}: references[{empty}] is empty: {self.name} needs at least one "
                             "reference")
        _check_environment(candidates, references, [self.name])

    def __call__(
        self, images: Optional[Sequence[Any]], candidates: Sequence[str], references: Optional[Sequence[Sequence[str]]]
    ) -> List[float]:
        if references is None:
            raise InputError(f"{self.name} is reference-based: references are required")
        return self._group.scores(self.name, candidates, references)

    def __repr__(self) -> str:
        return f"BaselineMetric({self.name!r})"


class _BaselineGroup:
    """The tokenised form of the last inputs and the per-combination scores computed on them so far."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inputs: Optional[Tuple[Tuple[str, ...], Tuple[Tuple[str, ...], ...]]] = None
        self._prepared: Optional[_Prepared] = None
        self._scores: Dict[str, List[float]] = {}

    def scores(self, name: str, candidates: Sequence[str], references: Sequence[Sequence[str]]) -> List[float]:
        _check_environment(candidates, references, [name])
        if not candidates:
            return []
        inputs = (tuple(candidates), tuple(tuple(item_references) for item_references in references))
        with self._lock:
            if inputs != self._inputs:
                self._prepared, self._scores = _Prepared(candidates, references), {}
                self._inputs = inputs
            if name not in self._scores:
                self._scores.update(_score(self._prepared, [name]))
            return self._prepared.per_item(self._scores[name])


def baseline_metrics(names: Sequence[str] = DEFAULT_BASELINES) -> Dict[str, BaselineMetric]:
    """``{name: BaselineMetric}`` (canonical names) sharing one group, for the generic metric interface."""
    group = _BaselineGroup()
    return {metric.name: metric for metric in (BaselineMetric(name, group) for name in names)}


_SHARED_GROUP = _BaselineGroup()
BASELINES: Dict[str, BaselineMetric] = {
    identifier: BaselineMetric(name, _SHARED_GROUP)
    for identifier, name in zip(
        ("bleu1", "bleu2", "bleu3", "bleu4", "meteor", "rouge_l", "cider", "spice"), BASELINE_NAMES
    )
}
"""Every baseline as a metric callable under a plain identifier (``"bleu4"``, ``"rouge_l"``...), one shared group."""

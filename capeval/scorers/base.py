"""What every scorer shares: validated chunked streaming, per-item and corpus results, signature, device, precision.

A concrete scorer sets :attr:`Scorer.family` (its :class:`~capeval.registry.MetricFamily`, which states its result
names, label, default model, references mode and precision), loads its model in ``__init__`` after
``super().__init__``, and implements :meth:`Scorer._score_chunk` (one validated chunk -> per-item score arrays by
result name) and :meth:`Scorer.signature_fields`. :meth:`Scorer.score` streams the inputs in chunks, concatenates the
per-item arrays, adds corpus means and the signature, and warns once with the count of truncated texts.
"""
from __future__ import annotations

import queue
import threading
import warnings
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Dict, Iterable, Iterator, List, Optional, Protocol, Sequence, Tuple

import numpy as np

from capeval.caller import user_stacklevel
from capeval.file_checks import FileChecks
from capeval.inputs import InputError, ScoringItems, TextPosition, TruncationWarning, iter_scoring_items
from capeval.options import check_positive_int
from capeval.registry import MetricFamily
from capeval.runtime import DeviceLike, resolve_device, resolve_precision
from capeval.version import __version__


def validated_ahead(chunks: Iterator[ScoringItems]) -> Iterator[ScoringItems]:
    """``chunks`` in order, each next one validated (files read, headers parsed, contents hashed) in a background
    thread while the caller scores the current one. An error of a chunk is raised when that chunk is reached; the
    thread stops when the caller stops iterating."""
    handoff: "queue.Queue[Tuple[str, Any]]" = queue.Queue(maxsize=1)
    stop = threading.Event()

    def validate() -> None:
        try:
            for chunk in chunks:
                while not stop.is_set():
                    try:
                        handoff.put(("chunk", chunk), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            handoff.put(("end", None))
        except BaseException as error:  # noqa: B902 - handed to the consumer, which raises it
            handoff.put(("error", error))

    thread = threading.Thread(target=validate, name="capeval-validation", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = handoff.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()
        while thread.is_alive():  # unblock a pending put, then let the thread see the stop
            try:
                handoff.get(timeout=0.1)
            except queue.Empty:
                pass
        thread.join()


class LoadedModel(Protocol):
    """What a result signature records of a loaded model."""

    name: str
    revision: Optional[str]

    @property
    def fingerprint(self) -> str: ...


def model_revision(model: LoadedModel) -> str:
    """The revision a signature records: the hub revision, or ``local-<content hash>`` of a local folder."""
    return model.revision if model.revision is not None else f"local-{model.fingerprint[:12]}"


class Scorer(ABC):
    """Base of every capeval scorer.

    Args:
        device: torch device; Accelerate's ``PartialState().device`` when ``None``.
        precision: ``"auto"`` (the reference code's precision on that device: fp32 on CPU,
            ``family.accelerator_precision`` on an accelerator), ``"fp32"``, ``"fp16"`` or ``"bf16"``.
        chunk_size: items validated and scored at a time, bounding memory for streamed (iterable) inputs.
    """

    family: ClassVar[MetricFamily]
    """The scorer's entry in :data:`capeval.registry.FAMILIES`."""
    per_item_only: ClassVar[Tuple[str, ...]] = ()
    """Result names reported per item only (``<name>s``), without a corpus mean."""

    def __init__(self, device: DeviceLike = None, precision: str = "auto", *, chunk_size: int = 1024) -> None:
        check_positive_int(chunk_size, "chunk_size")
        self.device = resolve_device(device)
        self.precision = resolve_precision(precision, self.family, self.device)
        self.chunk_size = chunk_size
        self.file_checks: Optional[FileChecks] = None
        """Processes that read, check and hash image files for validation; ``None``: this process's threads do."""
        self._truncated: List[TextPosition] = []

    @property
    def metric_name(self) -> str:
        """Name of the main result (``<metric_name>`` is the corpus mean, ``<metric_name>s`` the per-item list)."""
        return self.family.main_result

    @abstractmethod
    def signature_fields(self) -> Sequence[Tuple[str, object]]:
        """(name, value) of every setting that determines the numbers, besides precision and capeval version."""

    @property
    def signature(self) -> str:
        """sacreBLEU-style statement of everything that determines the numbers."""
        fields = [*self.signature_fields(), ("precision", self.precision), ("capeval", __version__)]
        return "|".join([self.metric_name, *(f"{name}:{value}" for name, value in fields)])

    def score(
        self,
        images: Iterable[Any],
        candidates: Iterable[str],
        references: Optional[Iterable[Sequence[str]]] = None,
    ) -> Dict[str, Any]:
        """Per-item and corpus scores; reference-based scores too when ``references`` is given.

        Inputs may be sequences or iterables (consumed in chunks). Corpus values are means of per-item values.
        References are required, optional or refused as the family's references mode says.
        """
        self._check_references_mode(references)
        per_item: Dict[str, List[np.ndarray]] = {}
        self._truncated = []
        try:
            for chunk in validated_ahead(self._chunks(images, candidates, references)):
                for name, values in self._score_chunk(chunk).items():
                    per_item.setdefault(name, []).append(values)
                del chunk  # release this chunk's images before the next one is read
        except BaseException:
            if self.file_checks is not None:  # as the decoding workers: no process outlives a failed call
                self.file_checks.close()
            raise
        if self._truncated:
            warnings.warn(self.truncation_warning(self._truncated), stacklevel=user_stacklevel())
        result: Dict[str, Any] = {}
        for name, parts in per_item.items():
            values = np.concatenate(parts)
            if name not in self.per_item_only:
                result[name] = float(np.mean(values))
            result[f"{name}s"] = [float(value) for value in values]
        result["signature"] = self.signature
        return result

    def _check_references_mode(self, references: Optional[Iterable[Sequence[str]]]) -> None:
        """``InputError`` when references are missing for a family that requires them or given to one without."""
        label, mode = self.family.label, self.family.references
        if references is None and mode == "required":
            raise InputError(f"{label} needs references: pass references=[[...], ...] (the references of each "
                             "candidate)")
        if references is not None and mode == "unused":
            raise InputError(f"{label} is reference-free and does not use references; call score(images, candidates)")

    def _chunks(
        self, images: Iterable[Any], candidates: Iterable[str], references: Optional[Iterable[Sequence[str]]]
    ) -> Iterator[ScoringItems]:
        """Validated chunks of ``chunk_size`` items (images validated as image inputs; a scorer taking other image
        inputs, such as region features, overrides this)."""
        return iter_scoring_items(images, candidates, references, self.chunk_size, file_checks=self.file_checks)

    @abstractmethod
    def _score_chunk(self, chunk: ScoringItems) -> Dict[str, np.ndarray]:
        """Per-item scores of one chunk by result name (``{"clip_score": ..., "ref_clip_score": ...}``); call
        :meth:`_record_truncated` with the positions of the texts cut to the model's context."""

    def _record_truncated(self, positions: Sequence[TextPosition]) -> None:
        """Record texts truncated while scoring; :meth:`score` warns once, naming the first few."""
        self._truncated.extend(positions)

    def truncation_warning(self, positions: Sequence[TextPosition]) -> TruncationWarning:
        """The warning shown when the texts at ``positions`` were truncated (a scorer that truncates overrides it)."""
        raise NotImplementedError(f"{type(self).__name__} recorded truncated texts but states no truncation rule")


"""``compute_metrics`` for transformers' ``Seq2SeqTrainer``: CLIP-S / PAC-S of generated captions.

How each prediction finds its original image
--------------------------------------------
The Trainer hands ``compute_metrics`` generated token ids and label ids, never the dataset rows, and it drops
non-tensor columns (the images, the references) before batching. The helper therefore keeps its own read access to
the evaluation dataset and maps prediction ``k`` to dataset row ``k``: predictions arrive in dataset order.

That order is what the Trainer produces for a map-style evaluation dataset: a ``SequentialSampler`` (one process) or
accelerate's interleaved batch shards, gathered per step in process order. In the default mode all rows arrive in
one call (concatenated, or as a list of per-batch arrays with ``eval_do_concat_batches=False``); with
``batch_eval_metrics=True`` they arrive batch by batch and are accumulated until ``compute_result=True``. Every
process receives all rows and computes the same metrics.

With several processes the last step is padded with repeats of the first rows. ``Trainer`` cuts them
(``gather_for_metrics``); ``Seq2SeqTrainer.evaluate`` / ``predict`` gather with ``accelerator.gather`` and keep them,
after the real rows: gathered row ``k`` is dataset row ``k % len(eval_dataset)``. Rows past the dataset's length are
accepted only when ``torch.distributed`` runs several processes, and are dropped.

The mapping is checked, never assumed silently: the number of predictions must equal the number of dataset rows,
and when the dataset has a label-id column, the labels the Trainer passes back for every gathered row (padding
repeats included) must decode to the same text as its dataset row's labels. Settings that reorder evaluation
(``train_sampling_strategy="group_by_length"``, which also groups evaluation batches, ``dataloader_in_order=False``,
a custom eval sampler) fail that check.
"""
from __future__ import annotations

import warnings
from typing import Any, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple, Union

import datasets
import numpy as np
import torch
from transformers import Seq2SeqTrainer, Trainer

from capeval.inputs import InputError, validate_references
from capeval.registry import FAMILIES, scorer_class


class CaptionScorer(Protocol):
    """What the helper needs from a scorer: :class:`capeval.CLIPScore` and :class:`capeval.PACScore` qualify."""

    metric_name: str
    ref_metric_name: str

    def score(
        self, images: Any, candidates: Sequence[str], references: Optional[Sequence[Sequence[str]]] = None
    ) -> Dict[str, Any]:
        """Corpus and per-item scores of ``candidates`` for ``images`` (and ``references``)."""


ScorerSpec = Union[None, str, CaptionScorer, Sequence[Union[str, CaptionScorer]]]


class _DatasetColumns:
    """Row-by-row access to the raw values of some columns of a map-style evaluation dataset.

    A ``datasets.Dataset`` is read without its format or transform (``with_format(None)``), so images come back as
    stored (PIL, path, bytes) even when the Trainer's copy turns them into ``pixel_values``. Any other dataset is read
    as ``dataset[row][column]``.
    """

    def __init__(self, dataset: Any, columns: Sequence[str]) -> None:
        if isinstance(dataset, datasets.IterableDataset) or not hasattr(dataset, "__len__"):
            raise InputError(
                f"eval_dataset must be a map-style dataset with a length (got {type(dataset).__name__}): "
                "predictions are matched to its rows by position"
            )
        self._num_rows = len(dataset)
        if self._num_rows == 0:
            raise InputError("eval_dataset is empty")
        self._dataset = dataset
        self._views: Dict[str, datasets.Dataset] = {}
        if isinstance(dataset, datasets.Dataset):
            raw = dataset.with_format(None)
            self.column_names = list(raw.column_names)
            self._views = {name: raw.select_columns([name]) for name in columns if name in self.column_names}
        else:
            first = dataset[0]
            if not isinstance(first, Mapping):
                raise InputError(f"eval_dataset[0] is a {type(first).__name__}; rows must be mappings of columns")
            self.column_names = list(first.keys())

    def __len__(self) -> int:
        return self._num_rows

    def value(self, row: int, column: str) -> Any:
        """The stored value of ``column`` in row ``row``."""
        view = self._views.get(column)
        return view[row][column] if view is not None else self._dataset[row][column]


class CaptionMetrics:
    """A ``compute_metrics`` callable scoring generated captions against the evaluation dataset's original images.

    Build it with :func:`build_compute_metrics`. Calls follow the Trainer's protocol: ``compute_result=True`` (the
    default mode always) scores every row received since the last result and resets; ``compute_result=False``
    (``batch_eval_metrics=True``) only accumulates the batch and returns ``{}``.
    """

    def __init__(
        self,
        decoder: Any,
        columns: _DatasetColumns,
        scorers: Sequence[CaptionScorer],
        image_column: str,
        references_column: Optional[str],
        labels_column: Optional[str],
    ) -> None:
        self._decoder = decoder
        self._columns = columns
        self._scorers = list(scorers)
        self._image_column = image_column
        self._references_column = references_column
        self._labels_column = labels_column
        self._expected_labels: Dict[int, str] = {}
        self._captions: List[str] = []
        self._num_received = 0

    def reset(self) -> None:
        """Forget the predictions accumulated so far (a ``batch_eval_metrics`` evaluation that was interrupted)."""
        self._captions = []
        self._num_received = 0

    def __call__(self, eval_pred: Any, compute_result: bool = True) -> Dict[str, float]:
        """Add ``eval_pred``'s predictions; when ``compute_result``, score all accumulated rows and reset."""
        try:
            self._add(eval_pred)
        except Exception:
            self.reset()
            raise
        if not compute_result:
            return {}
        captions = self._captions
        self.reset()
        if len(captions) != len(self._columns):
            raise InputError(
                f"compute_metrics received {len(captions)} predictions but eval_dataset has {len(self._columns)} rows; "
                "build compute_metrics with the dataset the Trainer evaluates (same rows, same order)"
            )
        return self._score(captions)

    def _decode(self, rows: List[List[int]]) -> List[str]:
        return [text.strip() for text in self._decoder.batch_decode(rows, skip_special_tokens=True)]

    def _add(self, eval_pred: Any) -> None:
        captions = self._decode(_token_rows(eval_pred.predictions, "predictions"))
        num_rows = len(self._columns)
        start = self._num_received
        if start + len(captions) > num_rows and not _several_processes():
            raise InputError(
                f"compute_metrics received more predictions ({start + len(captions)}) than eval_dataset has rows "
                f"({num_rows}); build compute_metrics with the dataset the Trainer evaluates"
            )
        if self._labels_column is not None and eval_pred.label_ids is not None:
            self._check_labels(eval_pred.label_ids, start, len(captions))
        self._captions.extend(captions[: max(num_rows - start, 0)])
        self._num_received += len(captions)

    def _expected_label(self, row: int) -> str:
        if row not in self._expected_labels:
            ids = [int(token) for token in self._columns.value(row, self._labels_column) if int(token) >= 0]
            self._expected_labels[row] = self._decode([ids])[0]
        return self._expected_labels[row]

    def _check_labels(self, label_ids: Any, start: int, count: int) -> None:
        """Check that gathered rows ``start`` to ``start + count`` carry the labels of dataset rows ``k % N``."""
        passed = self._decode(_token_rows(label_ids, "label_ids"))
        if len(passed) != count:
            raise InputError(f"label_ids has {len(passed)} rows but predictions has {count}")
        for offset, text in enumerate(passed):
            position = start + offset
            row = position % len(self._columns)
            expected = self._expected_label(row)
            if text != expected:
                raise InputError(
                    f"prediction {position}: its labels decode to {text!r} but eval_dataset row {row} column "
                    f"{self._labels_column!r} decodes to {expected!r}; predictions are not in eval_dataset order "
                    "(custom or length-grouped eval sampler, dataloader_in_order=False, or another dataset)"
                )

    def _references(self, row: int) -> List[str]:
        value = self._columns.value(row, self._references_column)
        try:
            return list(validate_references([value] if isinstance(value, str) else value, row))
        except InputError as error:
            raise InputError(f"eval_dataset row {row}, column {self._references_column!r}: {error}") from None

    def _score(self, captions: List[str]) -> Dict[str, float]:
        num_items = len(captions)
        scored_rows = [row for row, caption in enumerate(captions) if caption]
        num_empty = num_items - len(scored_rows)
        if num_empty:
            empty_rows = [row for row, caption in enumerate(captions) if not caption]
            warnings.warn(
                f"{num_empty} of {num_items} generated captions are empty after decoding (eval_dataset rows "
                f"{empty_rows[:10]}{'...' if num_empty > 10 else ''}); they score 0 in every metric and are counted "
                "in capeval_num_empty",
                UserWarning,
                stacklevel=2,
            )
        references = (
            [self._references(row) for row in scored_rows] if self._references_column is not None else None
        )
        metrics: Dict[str, float] = {}
        for scorer in self._scorers:
            names = [scorer.metric_name] + ([scorer.ref_metric_name] if references is not None else [])
            if not scored_rows:
                metrics.update({name: 0.0 for name in names})
                continue
            images = (self._columns.value(row, self._image_column) for row in scored_rows)
            try:
                result = scorer.score(images, [captions[row] for row in scored_rows], references)
            except InputError as error:
                if not num_empty:
                    raise
                raise InputError(
                    f"{error} (the scorer received only the non-empty predictions: its item k is eval_dataset row "
                    f"{scored_rows}[k])"
                ) from error
            # Empty captions score 0, so the mean over all items is the scorer's mean scaled by the scored share.
            share = len(scored_rows) / num_items
            metrics.update({name: float(result[name]) * share for name in names})
        metrics["capeval_num_items"] = num_items
        metrics["capeval_num_empty"] = num_empty
        return metrics


class ImageCaptioningTrainer(Seq2SeqTrainer):
    """``Seq2SeqTrainer`` whose ``generate()`` sees only the image inputs of each evaluation batch.

    Captioners trained on (image, caption) batches, such as BLIP and GIT, take the caption as ``input_ids`` for the
    loss. ``Seq2SeqTrainer`` passes the whole batch to ``generate()``, which these models read as a prompt: they
    continue the reference caption and the metrics score text copied from the labels. This trainer computes the
    evaluation loss on the whole batch and generates from the ``generation_input_names`` columns alone
    (``pixel_values`` by default), as at inference. VisionEncoderDecoder models give the same predictions with
    either trainer.
    """

    def __init__(self, *args: Any, generation_input_names: Sequence[str] = ("pixel_values",), **kwargs: Any) -> None:
        if isinstance(generation_input_names, str) or not generation_input_names:
            raise InputError(
                f"generation_input_names must be a non-empty sequence of names, got {generation_input_names!r}"
            )
        super().__init__(*args, **kwargs)
        self.generation_input_names: Tuple[str, ...] = tuple(generation_input_names)

    def prediction_step(
        self,
        model: torch.nn.Module,
        inputs: Dict[str, Any],
        prediction_loss_only: bool,
        ignore_keys: Optional[List[str]] = None,
        **gen_kwargs: Any,
    ) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor], Optional[torch.Tensor]]:
        """Loss on the whole batch; generated ids from the image inputs alone; the batch's labels."""
        if not self.args.predict_with_generate or prediction_loss_only:
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys, **gen_kwargs)
        missing = [name for name in self.generation_input_names if name not in inputs]
        if missing:
            raise InputError(
                f"the evaluation batch has no {missing} (generation_input_names); its keys are {sorted(inputs)}"
            )
        inputs = self._prepare_inputs(inputs)
        labels = inputs.get("labels")
        loss = None
        if labels is not None:
            loss = Trainer.prediction_step(self, model, inputs, prediction_loss_only=True, ignore_keys=ignore_keys)[0]
        generation_inputs = {name: inputs[name] for name in self.generation_input_names}
        _, generated, _ = super().prediction_step(
            model, generation_inputs, prediction_loss_only=False, ignore_keys=ignore_keys, **gen_kwargs
        )
        return loss, generated, None if labels is None else labels.detach()


def _several_processes() -> bool:
    """Whether ``torch.distributed`` runs more than one process (whose Trainer gathers padded last steps)."""
    return (torch.distributed.is_available() and torch.distributed.is_initialized()
            and torch.distributed.get_world_size() > 1)


def _token_rows(values: Any, name: str) -> List[List[int]]:
    """Token-id rows of an EvalPrediction field without the Trainer's negative (-100) padding.

    ``values`` is a (rows, length) integer array or tensor, or a list of them, one per batch
    (``eval_do_concat_batches=False``).
    """
    if isinstance(values, list):
        return [row for batch in values for row in _token_rows(batch, name)]
    if isinstance(values, tuple):
        raise InputError(
            f"{name} is a tuple of {len(values)} arrays; expected one (rows, length) array of token ids "
            "(evaluate with Seq2SeqTrainer and predict_with_generate=True)"
        )
    array = values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values)
    if array.ndim != 2 or not np.issubdtype(array.dtype, np.integer):
        raise InputError(
            f"{name} has shape {array.shape} and dtype {array.dtype}; expected integer token ids of shape "
            "(rows, length): evaluate with Seq2SeqTrainer and predict_with_generate=True"
        )
    return [row[row >= 0].tolist() for row in array]


def _image_families() -> List[str]:
    """The names of the metric families that score images (a captioner's evaluation images)."""
    return sorted(name for name, family in FAMILIES.items() if family.inputs == "images")


def _family_names() -> str:
    return ", ".join(repr(name) for name in _image_families())


def _resolve_scorers(scorer: ScorerSpec) -> List[CaptionScorer]:
    specs = list(scorer) if isinstance(scorer, (list, tuple)) else ["clipscore" if scorer is None else scorer]
    if not specs:
        raise InputError("scorer is an empty list; give at least one scorer")
    scorers: List[CaptionScorer] = []
    for index, spec in enumerate(specs):
        if isinstance(spec, str):
            if spec not in _image_families():
                scores = f" (a metric of {FAMILIES[spec].inputs})" if spec in FAMILIES else ""
                raise InputError(f"scorer[{index}] is {spec!r}{scores}; expected {_family_names()} or a scorer "
                                 "instance")
            scorers.append(scorer_class(spec)())
        elif all(hasattr(spec, attribute) for attribute in ("score", "metric_name", "ref_metric_name")):
            scorers.append(spec)
        else:
            raise InputError(
                f"scorer[{index}] has type {type(spec).__name__}; expected {_family_names()} or a scorer "
                "instance such as capeval.CLIPScore(...)"
            )
    names = [scorer.metric_name for scorer in scorers]
    if len(set(names)) != len(names):
        raise InputError(f"scorers report the same metric names {names}; give at most one scorer per metric")
    return scorers


def build_compute_metrics(
    processor: Any,
    eval_dataset: Any,
    scorer: ScorerSpec = None,
    image_column: str = "image",
    references_column: Optional[str] = "references",
    labels_column: Optional[str] = "labels",
) -> CaptionMetrics:
    """A ``compute_metrics`` for ``Seq2SeqTrainer(..., args=Seq2SeqTrainingArguments(predict_with_generate=True))``.

    Generated ids are decoded with ``processor.batch_decode(..., skip_special_tokens=True)`` and stripped; prediction
    ``k`` is scored against the original image (and references) of ``eval_dataset`` row ``k`` (see the module
    docstring for why and how this is checked). Works with ``batch_eval_metrics=True`` and with the default mode.
    One ``compute_metrics`` serves one evaluation dataset: a Trainer evaluating a dict of datasets with it is not
    supported (the row checks reject the other datasets).

    BLIP and GIT: train and evaluate them with :class:`ImageCaptioningTrainer` (``Seq2SeqTrainer`` would let them
    continue the reference caption given as ``input_ids``).

    Args:
        processor: the tokenizer or processor that decodes the model's token ids (anything with ``batch_decode``).
        eval_dataset: the map-style dataset the Trainer evaluates, or a row-aligned copy of it that still holds the
            original images; a ``datasets.Dataset`` is read without its transform.
        scorer: ``None`` or ``"clipscore"`` (``capeval.CLIPScore()``), ``"pacscore"`` (``capeval.PACScore()``), a
            scorer instance, or a list of these (one per metric name).
        image_column: column holding the original images (PIL image, path, bytes or uint8 array).
        references_column: column holding each row's reference captions (a list of strings, or one string);
            ``None`` reports no reference-based metric.
        labels_column: column holding each row's label ids; when ``eval_dataset`` has it, the labels the Trainer
            passes back are checked against it row by row. ``None`` disables the check.

    Returns:
        A :class:`CaptionMetrics` whose results hold, per scorer, ``metric_name`` (e.g. ``clip_score``) and, with
        references, ``ref_metric_name`` (e.g. ``ref_clip_score``): means over all rows, where an empty decoded
        caption scores 0 (with a warning); plus ``capeval_num_items`` (rows scored) and ``capeval_num_empty``.
    """
    if not callable(getattr(processor, "batch_decode", None)):
        raise InputError(f"processor has type {type(processor).__name__} and no batch_decode method")
    wanted = [image_column, references_column, labels_column]
    columns = _DatasetColumns(eval_dataset, [name for name in wanted if name is not None])
    for role, name in (("image_column", image_column), ("references_column", references_column)):
        if name is not None and name not in columns.column_names:
            raise InputError(
                f"eval_dataset has no column {name!r} ({role}); its columns are {columns.column_names}"
                + ("; pass references_column=None to report no reference-based metric" if role == "references_column"
                   else "")
            )
    if labels_column is not None and labels_column not in columns.column_names:
        labels_column = None
    return CaptionMetrics(processor, columns, _resolve_scorers(scorer), image_column, references_column, labels_column)

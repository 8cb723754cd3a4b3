"""capeval.integrations.trainer: CLIP-S / RefCLIP-S of generated captions inside Seq2SeqTrainer evaluation.

A tiny random VisionEncoderDecoder (ViT + GPT-2, fixed seed) with a word-level tokenizer built here is trained for
two steps on 12 Flickr8k images; every metric the Trainer logs is checked against capeval's CLIPScore run directly
on the decoded predictions and the original image files.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import datasets
import numpy as np
import pytest
import torch
from PIL import Image
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
from transformers import (
    GPT2Config,
    PreTrainedTokenizerFast,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    VisionEncoderDecoderConfig,
    VisionEncoderDecoderModel,
    ViTConfig,
    ViTImageProcessor,
)
from transformers.trainer_utils import EvalPrediction

from capeval import CLIPScore, InputError, PACScore
from capeval.integrations import trainer as trainer_integration
from capeval.integrations.trainer import build_compute_metrics

NUM_IMAGES = 12
EVAL_BATCH_SIZE = 5  # does not divide NUM_IMAGES: the last evaluation batch is short
SPECIAL_TOKENS = ["[PAD]", "[BOS]", "[EOS]", "[UNK]"]
PAD, BOS, EOS, UNK = range(len(SPECIAL_TOKENS))
SEED = 0


class RecordingCLIPScore(CLIPScore):
    """CLIPScore that keeps the inputs of every ``score`` call."""

    def __init__(self, model: Path) -> None:
        super().__init__(model=model)
        self.calls: List[Dict[str, Any]] = []

    def score(self, images: Any, candidates: Sequence[str], references: Optional[Sequence[Sequence[str]]] = None
              ) -> Dict[str, Any]:
        images = list(images)
        self.calls.append({"images": images, "candidates": list(candidates), "references": references})
        return super().score(images, candidates, references)


@dataclass
class Captioning:
    """The trained tiny captioner, its data, and what CLIPScore gives directly on its predictions."""

    tokenizer: PreTrainedTokenizerFast
    model: VisionEncoderDecoderModel
    image_processor: ViTImageProcessor
    paths: List[Path]
    references: List[List[str]]
    eval_dataset: datasets.Dataset
    train_log: List[Dict[str, float]]
    captions: List[str]
    direct: Dict[str, Any]


def flickr8k_items(flickr8k: Path) -> tuple:
    """The first NUM_IMAGES 224px Flickr8k images of the folder ``flickr8k`` and their five reference captions each."""
    paths = sorted((flickr8k / "images_224").iterdir())[:NUM_IMAGES]
    names = {path.name for path in paths}
    references: Dict[str, List[str]] = {}
    for line in (flickr8k / "Flickr8k.token.txt").read_text().splitlines():
        key, caption = line.split("\t")
        name = key.split("#")[0]
        if name in names:
            references.setdefault(name, []).append(caption)
    return paths, [references[path.name] for path in paths]


def word_tokenizer(references: List[List[str]]) -> PreTrainedTokenizerFast:
    """A lower-casing whitespace word-level tokenizer over the words of ``references``."""
    words = sorted({word for refs in references for ref in refs for word in ref.lower().split()})
    vocab = {token: index for index, token in enumerate(SPECIAL_TOKENS + words)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.normalizer = normalizers.Lowercase()
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", bos_token="[BOS]",
                                   eos_token="[EOS]", unk_token="[UNK]")


def tiny_captioner(vocab_size: int) -> VisionEncoderDecoderModel:
    """Random ViT-encoder / GPT-2-decoder captioner whose greedy captions always hold at least one word."""
    torch.manual_seed(SEED)
    encoder = ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, initializer_range=1.0)
    decoder = GPT2Config(vocab_size=vocab_size, n_positions=64, n_embd=32, n_layer=1, n_head=2,
                         bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD, initializer_range=1.0)
    config = VisionEncoderDecoderConfig.from_encoder_decoder_configs(encoder, decoder)
    config.decoder_start_token_id, config.pad_token_id, config.eos_token_id = BOS, PAD, EOS
    model = VisionEncoderDecoderModel(config=config)
    model.generation_config.update(decoder_start_token_id=BOS, pad_token_id=PAD, eos_token_id=EOS, max_length=7,
                                   min_length=2, suppress_tokens=[PAD, BOS, UNK])
    return model


def collate(features: List[Dict[str, Any]]) -> Dict[str, torch.Tensor]:
    """Stack pixel values; right-pad labels with -100."""
    length = max(len(feature["labels"]) for feature in features)
    return {
        "pixel_values": torch.tensor(np.array([feature["pixel_values"] for feature in features]), dtype=torch.float32),
        "labels": torch.tensor([list(f["labels"]) + [-100] * (length - len(f["labels"])) for f in features]),
    }


def training_arguments(output_dir: Path, **overrides: Any) -> Seq2SeqTrainingArguments:
    settings: Dict[str, Any] = dict(
        output_dir=str(output_dir), use_cpu=True, report_to=[], save_strategy="no", max_steps=2,
        per_device_train_batch_size=4, per_device_eval_batch_size=EVAL_BATCH_SIZE, learning_rate=1e-3,
        predict_with_generate=True, seed=SEED, disable_tqdm=True,
    )
    settings.update(overrides)
    return Seq2SeqTrainingArguments(**settings)


def raw_dataset(paths: List[Path], references: List[List[str]]) -> datasets.Dataset:
    return datasets.Dataset.from_dict(
        {"image": [str(path) for path in paths], "references": references}
    ).cast_column("image", datasets.Image())


def model_inputs(batch: Dict[str, list], tokenizer: PreTrainedTokenizerFast, image_processor: ViTImageProcessor
                 ) -> Dict[str, Any]:
    """pixel_values of the images and, as labels, the first reference's ids followed by [EOS]."""
    return {
        "pixel_values": image_processor(batch["image"], return_tensors="np")["pixel_values"],
        "labels": [tokenizer(refs[0])["input_ids"] + [EOS] for refs in batch["references"]],
    }


def decode_independently(tokenizer: PreTrainedTokenizerFast, predictions: np.ndarray) -> List[str]:
    ids = np.where(predictions < 0, tokenizer.pad_token_id, predictions)
    return [text.strip() for text in tokenizer.batch_decode(ids, skip_special_tokens=True)]


def eval_logs(log_history: List[Dict[str, float]]) -> List[Dict[str, float]]:
    return [entry for entry in log_history if "eval_clip_score" in entry]


@pytest.fixture(scope="module")
def captioning(tiny_openai_clip: Any, tmp_path_factory: pytest.TempPathFactory, capeval_test_data: Path) -> Captioning:
    """Train 2 steps with evaluation at step 2 (default metrics mode); score the predictions directly."""
    paths, references = flickr8k_items(capeval_test_data / "flickr8k")
    tokenizer = word_tokenizer(references)
    image_processor = ViTImageProcessor(size={"height": 32, "width": 32})
    dataset = raw_dataset(paths, references).map(
        model_inputs, batched=True, fn_kwargs={"tokenizer": tokenizer, "image_processor": image_processor}
    )
    model = tiny_captioner(len(tokenizer))
    trainer = Seq2SeqTrainer(
        model=model,
        args=training_arguments(tmp_path_factory.mktemp("trainer"), eval_strategy="steps", eval_steps=2),
        train_dataset=dataset, eval_dataset=dataset, data_collator=collate, processing_class=tokenizer,
        compute_metrics=build_compute_metrics(tokenizer, dataset, CLIPScore(model=tiny_openai_clip.hf_dir)),
    )
    trainer.train()
    predictions = trainer.predict(dataset).predictions
    captions = decode_independently(tokenizer, predictions)
    direct = CLIPScore(model=tiny_openai_clip.hf_dir).score([str(path) for path in paths], captions, references)
    return Captioning(tokenizer, model, image_processor, paths, references, dataset, trainer.state.log_history,
                      captions, direct)


@pytest.fixture(scope="module")
def clip_scorer(tiny_openai_clip: Any) -> CLIPScore:
    return CLIPScore(model=tiny_openai_clip.hf_dir)


def test_default_mode_logs_clip_scores_of_every_item(captioning: Captioning) -> None:
    (entry,) = eval_logs(captioning.train_log)
    assert entry["step"] == 2
    assert entry["eval_capeval_num_items"] == NUM_IMAGES
    assert entry["eval_capeval_num_empty"] == 0
    assert all(captioning.captions)
    assert len(set(captioning.captions)) > 1 and captioning.direct["clip_score"] > 0  # a wrong pairing shows
    assert entry["eval_clip_score"] == pytest.approx(captioning.direct["clip_score"], rel=1e-12)
    assert entry["eval_ref_clip_score"] == pytest.approx(captioning.direct["ref_clip_score"], rel=1e-12)


@pytest.mark.parametrize("mode", ["batch_eval_metrics", "unconcatenated_batches"])
def test_other_modes_score_each_prediction_against_its_original_image(
    captioning: Captioning, tiny_openai_clip: Any, tmp_path: Path, mode: str
) -> None:
    if mode == "batch_eval_metrics":
        # Precomputed pixel_values and labels; the Trainer drops the image and references columns.
        dataset = captioning.eval_dataset
        overrides: Dict[str, Any] = {"batch_eval_metrics": True}
    else:
        # Model inputs from a transform: the helper reads the same dataset without its transform.
        dataset = raw_dataset(captioning.paths, captioning.references).with_transform(
            lambda batch: model_inputs(batch, captioning.tokenizer, captioning.image_processor)
        )
        overrides = {"eval_do_concat_batches": False, "remove_unused_columns": False}
    scorer = RecordingCLIPScore(tiny_openai_clip.hf_dir)
    trainer = Seq2SeqTrainer(
        model=captioning.model, args=training_arguments(tmp_path, **overrides), eval_dataset=dataset,
        data_collator=collate, processing_class=captioning.tokenizer,
        compute_metrics=build_compute_metrics(captioning.tokenizer, dataset, scorer),
    )
    trainer.evaluate()
    trainer.evaluate()  # a second evaluation starts from an empty accumulator

    logs = eval_logs(trainer.state.log_history)
    assert len(logs) == 2
    for entry in logs:
        assert entry["eval_capeval_num_items"] == NUM_IMAGES
        assert entry["eval_capeval_num_empty"] == 0
        assert entry["eval_clip_score"] == pytest.approx(captioning.direct["clip_score"], rel=1e-12)
        assert entry["eval_ref_clip_score"] == pytest.approx(captioning.direct["ref_clip_score"], rel=1e-12)
    assert len(scorer.calls) == 2
    for call in scorer.calls:
        assert call["candidates"] == captioning.captions
        assert call["references"] == captioning.references
        assert len(call["images"]) == NUM_IMAGES
        for image, path in zip(call["images"], captioning.paths):
            assert np.array_equal(np.asarray(image), np.asarray(Image.open(path)))


def label_rows(dataset: datasets.Dataset) -> np.ndarray:
    """The dataset's label ids as the Trainer passes them: -100 padded to one length."""
    labels = dataset["labels"]
    length = max(len(row) for row in labels)
    return np.array([list(row) + [-100] * (length - len(row)) for row in labels])


def caption_ids(tokenizer: PreTrainedTokenizerFast, captions: List[str]) -> np.ndarray:
    """Generated-id rows: [BOS] caption [EOS], [PAD]-padded then -100-padded as the Trainer does."""
    rows = [[BOS] + tokenizer(caption)["input_ids"] + [EOS] for caption in captions]
    length = max(len(row) for row in rows)
    return np.array([row + [PAD] + [-100] * (length - len(row)) for row in rows])


def test_empty_predictions_score_zero_and_are_counted(captioning: Captioning, clip_scorer: CLIPScore) -> None:
    captions = [captioning.references[row][1] for row in range(NUM_IMAGES)]
    predictions = caption_ids(captioning.tokenizer, captions)
    empty_rows = [3, 7]
    for row in empty_rows:
        predictions[row] = -100
        predictions[row, :3] = [BOS, EOS, PAD]
    compute_metrics = build_compute_metrics(captioning.tokenizer, captioning.eval_dataset, clip_scorer)

    with pytest.warns(UserWarning, match=r"2 of 12 generated captions are empty .*\[3, 7\]"):
        metrics = compute_metrics(EvalPrediction(predictions, label_rows(captioning.eval_dataset)))

    kept = [row for row in range(NUM_IMAGES) if row not in empty_rows]
    direct = clip_scorer.score([str(captioning.paths[row]) for row in kept], [captions[row] for row in kept],
                               [captioning.references[row] for row in kept])
    assert metrics["capeval_num_items"] == NUM_IMAGES
    assert metrics["capeval_num_empty"] == 2
    assert metrics["clip_score"] == pytest.approx(sum(direct["clip_scores"]) / NUM_IMAGES, rel=1e-9)
    assert metrics["ref_clip_score"] == pytest.approx(sum(direct["ref_clip_scores"]) / NUM_IMAGES, rel=1e-9)


def test_predictions_out_of_dataset_order_are_rejected(captioning: Captioning, clip_scorer: CLIPScore) -> None:
    predictions = caption_ids(captioning.tokenizer, ["a dog"] * NUM_IMAGES)
    labels = label_rows(captioning.eval_dataset)
    labels[[4, 5]] = labels[[5, 4]]
    compute_metrics = build_compute_metrics(captioning.tokenizer, captioning.eval_dataset, clip_scorer)
    with pytest.raises(InputError, match=r"prediction 4: its labels decode to .* eval_dataset row 4"):
        compute_metrics(EvalPrediction(predictions, labels))


def test_wrong_number_of_predictions_is_rejected_and_accumulation_resets(
    captioning: Captioning, clip_scorer: CLIPScore
) -> None:
    predictions = caption_ids(captioning.tokenizer, ["a dog"] * NUM_IMAGES)
    labels = label_rows(captioning.eval_dataset)
    compute_metrics = build_compute_metrics(captioning.tokenizer, captioning.eval_dataset, clip_scorer)
    with pytest.raises(InputError, match="received 11 predictions but eval_dataset has 12 rows"):
        compute_metrics(EvalPrediction(predictions[:11], labels[:11]))
    compute_metrics(EvalPrediction(predictions[:8], labels[:8]), compute_result=False)
    with pytest.raises(InputError, match=r"more predictions \(16\) than eval_dataset has rows \(12\)"):
        compute_metrics(EvalPrediction(predictions[:8], labels[:8]), compute_result=False)
    metrics = compute_metrics(EvalPrediction(predictions, labels))
    assert metrics["capeval_num_items"] == NUM_IMAGES


def test_logits_instead_of_generated_ids_are_rejected(captioning: Captioning, clip_scorer: CLIPScore) -> None:
    compute_metrics = build_compute_metrics(captioning.tokenizer, captioning.eval_dataset, clip_scorer)
    logits = np.zeros((NUM_IMAGES, 4, len(captioning.tokenizer)), dtype=np.float32)
    with pytest.raises(InputError, match="predict_with_generate=True"):
        compute_metrics(EvalPrediction(logits, label_rows(captioning.eval_dataset)))


def test_missing_references_column_is_an_error_unless_disabled(
    captioning: Captioning, clip_scorer: CLIPScore
) -> None:
    dataset = captioning.eval_dataset.remove_columns("references")
    with pytest.raises(InputError, match="no column 'references'.*references_column=None"):
        build_compute_metrics(captioning.tokenizer, dataset, clip_scorer)
    compute_metrics = build_compute_metrics(captioning.tokenizer, dataset, clip_scorer, references_column=None)
    captions = [captioning.references[row][0] for row in range(NUM_IMAGES)]
    metrics = compute_metrics(EvalPrediction(caption_ids(captioning.tokenizer, captions), label_rows(dataset)))
    direct = clip_scorer.score([str(path) for path in captioning.paths], captions)
    assert set(metrics) == {"clip_score", "capeval_num_items", "capeval_num_empty"}
    assert metrics["clip_score"] == pytest.approx(direct["clip_score"], rel=1e-12)



def test_multi_process_padding_repeats_are_checked_and_dropped(
    captioning: Captioning, clip_scorer: CLIPScore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Seq2SeqTrainer on 2 processes, eval batch 5: two gathered steps of 10 rows, the last 8 repeating rows 0-7.
    monkeypatch.setattr(trainer_integration, "_several_processes", lambda: True)
    captions = [captioning.references[row][2] for row in range(NUM_IMAGES)]
    predictions = caption_ids(captioning.tokenizer, captions + captions[:8])
    labels = label_rows(captioning.eval_dataset)
    labels = np.concatenate([labels, labels[:8]])
    compute_metrics = build_compute_metrics(captioning.tokenizer, captioning.eval_dataset, clip_scorer)

    assert compute_metrics(EvalPrediction(predictions[:10], labels[:10]), compute_result=False) == {}
    metrics = compute_metrics(EvalPrediction(predictions[10:], labels[10:]), compute_result=True)
    direct = clip_scorer.score([str(path) for path in captioning.paths], captions, captioning.references)
    assert metrics["capeval_num_items"] == NUM_IMAGES
    assert metrics["clip_score"] == pytest.approx(direct["clip_score"], rel=1e-12)
    assert metrics["ref_clip_score"] == pytest.approx(direct["ref_clip_score"], rel=1e-12)

    labels[13] = labels[4]
    with pytest.raises(InputError, match=r"prediction 13: .* eval_dataset row 1 "):
        compute_metrics(EvalPrediction(predictions, labels))


def test_several_scorers_report_each_metric(captioning: Captioning, clip_scorer: CLIPScore,
                                            tiny_openai_clip: Any) -> None:
    pac_scorer = PACScore(model=tiny_openai_clip.hf_dir)
    with pytest.raises(InputError, match="same metric names"):
        build_compute_metrics(captioning.tokenizer, captioning.eval_dataset, [clip_scorer, clip_scorer])
    compute_metrics = build_compute_metrics(captioning.tokenizer, captioning.eval_dataset, [clip_scorer, pac_scorer])
    captions = [captioning.references[row][3] for row in range(NUM_IMAGES)]
    metrics = compute_metrics(EvalPrediction(caption_ids(captioning.tokenizer, captions),
                                             label_rows(captioning.eval_dataset)))
    paths = [str(path) for path in captioning.paths]
    direct_clip = clip_scorer.score(paths, captions, captioning.references)
    direct_pac = pac_scorer.score(paths, captions, captioning.references)
    assert metrics["clip_score"] == pytest.approx(direct_clip["clip_score"], rel=1e-12)
    assert metrics["ref_clip_score"] == pytest.approx(direct_clip["ref_clip_score"], rel=1e-12)
    assert metrics["pac_score"] == pytest.approx(direct_pac["pac_score"], rel=1e-12)
    assert metrics["ref_pac_score"] == pytest.approx(direct_pac["ref_pac_score"], rel=1e-12)


def test_video_metrics_are_refused_by_name(captioning: Captioning) -> None:
    with pytest.raises(InputError, match=r"^scorer\[0\] is 'emscore' \(a metric of videos\); expected 'bridge', "
                                         r"'clipscore', 'pacscore', 'polos', 'tigerscore', 'vilbertscore' or a scorer "
                                         r"instance$"):
        build_compute_metrics(captioning.tokenizer, captioning.eval_dataset, "emscore")

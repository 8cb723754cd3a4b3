"""ImageCaptioningTrainer: BLIP and GIT, which take the caption as input_ids, generate from the image alone.

Tiny random BLIP and GIT models (fixed seed) with the word-level tokenizer of test_trainer_integration are trained
for two steps on 12 Flickr8k images with evaluation at step 2; the logged metrics must equal CLIPScore of the
captions that ``model.generate(pixel_values=...)`` gives directly, and the evaluation loss must equal the stock
``Seq2SeqTrainer``'s, whose predictions continue the reference captions instead.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest
import torch
from transformers import (
    BlipConfig,
    BlipForConditionalGeneration,
    CLIPImageProcessor,
    GitConfig,
    GitForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Seq2SeqTrainer,
)

from capeval import CLIPScore, InputError
from capeval.integrations.trainer import ImageCaptioningTrainer, build_compute_metrics
from test_trainer_integration import (
    BOS,
    EOS,
    NUM_IMAGES,
    PAD,
    SEED,
    UNK,
    decode_independently,
    eval_logs,
    flickr8k_items,
    raw_dataset,
    training_arguments,
    word_tokenizer,
)

TINY = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, initializer_range=1.0)
TINY_VISION = dict(TINY, image_size=32, patch_size=8)
GENERATION = dict(max_new_tokens=5, min_new_tokens=2, suppress_tokens=[PAD, BOS, UNK])


def tiny_blip(vocab_size: int) -> BlipForConditionalGeneration:
    torch.manual_seed(SEED)
    text = dict(TINY, vocab_size=vocab_size, max_position_embeddings=64, encoder_hidden_size=32, bos_token_id=BOS,
                sep_token_id=EOS, eos_token_id=EOS, pad_token_id=PAD)
    model = BlipForConditionalGeneration(BlipConfig(text_config=text, vision_config=TINY_VISION))
    model.text_decoder.generation_config.update(**GENERATION)  # BLIP's generate() runs its text decoder's
    return model


def tiny_git(vocab_size: int) -> GitForCausalLM:
    torch.manual_seed(SEED)
    model = GitForCausalLM(GitConfig(vision_config=TINY_VISION, vocab_size=vocab_size, max_position_embeddings=64,
                                     bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD, **TINY))
    model.generation_config.update(**GENERATION)
    return model


BUILDERS = {"blip": tiny_blip, "git": tiny_git}


def caption_inputs(batch: Dict[str, list], tokenizer: PreTrainedTokenizerFast, image_processor: CLIPImageProcessor
                   ) -> Dict[str, Any]:
    """pixel_values, and the first reference as [BOS] caption [EOS]: input_ids and labels alike."""
    ids = [[BOS] + tokenizer(refs[0])["input_ids"] + [EOS] for refs in batch["references"]]
    return {"pixel_values": image_processor(batch["image"], return_tensors="np")["pixel_values"],
            "input_ids": ids, "labels": ids}


def collate(features: List[Dict[str, Any]]) -> Dict[str, torch.Tensor]:
    """Stack pixel values; right-pad input_ids with [PAD] (masked) and labels with -100."""
    length = max(len(feature["input_ids"]) for feature in features)

    def padded(key: str, value: int) -> torch.Tensor:
        return torch.tensor([list(f[key]) + [value] * (length - len(f[key])) for f in features])

    input_ids = padded("input_ids", PAD)
    return {
        "pixel_values": torch.tensor(np.array([f["pixel_values"] for f in features]), dtype=torch.float32),
        "input_ids": input_ids, "attention_mask": (input_ids != PAD).long(), "labels": padded("labels", -100),
    }


def first_words(caption: str, count: int) -> str:
    return " ".join(caption.lower().split()[:count])


@pytest.mark.parametrize("arch", sorted(BUILDERS))
def test_captioner_generates_from_the_image_alone(arch: str, tiny_openai_clip: Any, tmp_path: Path,
                                                  capeval_test_data: Path) -> None:
    paths, references = flickr8k_items(capeval_test_data / "flickr8k")
    tokenizer = word_tokenizer(references)
    image_processor = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    dataset = raw_dataset(paths, references).map(
        caption_inputs, batched=True, fn_kwargs={"tokenizer": tokenizer, "image_processor": image_processor})
    model: PreTrainedModel = BUILDERS[arch](len(tokenizer))
    trainer = ImageCaptioningTrainer(
        model=model, args=training_arguments(tmp_path / "ours", eval_strategy="steps", eval_steps=2),
        train_dataset=dataset, eval_dataset=dataset, data_collator=collate, processing_class=tokenizer,
        compute_metrics=build_compute_metrics(tokenizer, dataset, CLIPScore(model=tiny_openai_clip.hf_dir)),
    )
    trainer.train()
    (entry,) = eval_logs(trainer.state.log_history)

    model.eval()
    with torch.inference_mode():
        generated = model.generate(pixel_values=torch.tensor(np.array(dataset["pixel_values"]), dtype=torch.float32))
    captions = decode_independently(tokenizer, generated.numpy())
    direct = CLIPScore(model=tiny_openai_clip.hf_dir).score([str(path) for path in paths], captions, references)
    assert all(captions) and len(set(captions)) > 1
    assert entry["eval_capeval_num_items"] == NUM_IMAGES
    assert entry["eval_capeval_num_empty"] == 0
    assert entry["eval_clip_score"] == pytest.approx(direct["clip_score"], rel=1e-9)
    assert entry["eval_ref_clip_score"] == pytest.approx(direct["ref_clip_score"], rel=1e-9)

    # The stock trainer: same loss on the whole batch, but generation continues each reference caption.
    stock = Seq2SeqTrainer(model=model, args=training_arguments(tmp_path / "stock"), eval_dataset=dataset,
                           data_collator=collate, processing_class=tokenizer)
    stock_captions = decode_independently(tokenizer, stock.predict(dataset).predictions)
    assert all(caption.startswith(first_words(refs[0], 3)) for caption, refs in zip(stock_captions, references))
    assert not any(caption.startswith(first_words(refs[0], 3)) for caption, refs in zip(captions, references))
    assert stock.evaluate()["eval_loss"] == pytest.approx(trainer.evaluate()["eval_loss"], rel=1e-6)


def test_missing_generation_input_is_named(tiny_openai_clip: Any, tmp_path: Path, capeval_test_data: Path) -> None:
    paths, references = flickr8k_items(capeval_test_data / "flickr8k")
    tokenizer = word_tokenizer(references)
    image_processor = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    dataset = raw_dataset(paths, references).map(
        caption_inputs, batched=True, fn_kwargs={"tokenizer": tokenizer, "image_processor": image_processor})
    trainer = ImageCaptioningTrainer(model=tiny_git(len(tokenizer)), args=training_arguments(tmp_path),
                                     eval_dataset=dataset, data_collator=collate, processing_class=tokenizer,
                                     generation_input_names=["pixel_values", "image_sizes"])
    with pytest.raises(InputError, match=r"no \['image_sizes'\] \(generation_input_names\)"):
        trainer.predict(dataset)
    with pytest.raises(InputError, match="non-empty sequence"):
        ImageCaptioningTrainer(model=tiny_git(len(tokenizer)), args=training_arguments(tmp_path),
                               generation_input_names="pixel_values")


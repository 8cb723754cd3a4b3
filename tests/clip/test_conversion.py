"""Tests for conversion/convert_clip.py: parity with the original models, key checks, tokenizer, full-size configs."""
from __future__ import annotations

import json
from pathlib import Path

import clip
import clip.model
import clip.simple_tokenizer
import open_clip
import open_clip.model
import pytest
import torch
from PIL import Image
from transformers import AutoTokenizer, CLIPConfig, CLIPImageProcessor, CLIPModel

from conversion.clip_converter import (CheckpointError, clip_config_from_state_dict, convert_checkpoint,
                                       convert_state_dict)
from conversion.convert_clip import INCEPTION_MEAN, INCEPTION_STD, OPENAI_MEAN, OPENAI_STD, main
from fixtures.clip_checkpoints import TinyClip, save_pacs_checkpoint, save_torchscript_archive

IMAGE_NAMES = ["1056338697_4f7d7ce270.jpg", "106490881_5a2dd9b7bd.jpg", "1082379191_ec1e53f996.jpg"]
LONG_CAPTION = " ".join(["a small brown dog with a red collar jumps over a wooden fence in the park"] * 6)
TRICKY_TEXTS = [
    "don't stop, it's the dog's ball; they're here and we've won, i'm sure you'll see he'd go",
    "a man , a plan , a canal : panama !!! ?! ... -- (brackets) [square] {curly} <angle> #hash @at $5.99 100%",
    "3 dogs and 12 cats in 2024 , 1st place 3.14159 0.5x",
    "café naïve résumé façade jalapeño über straße",
    "a dog 🐶 with a ball ⚽️ and a smile 😀👍🏽",
    "fish & chips &amp; peas &lt;b&gt;",
    "一只狗在草地上奔跑 日本語のテキスト 한국어",
    "tab\tand\nnewline   spaces",
    "curly “quotes” and ‘apostrophes’ — dashes – here",
    "x",
    "!!",
    "<|endoftext|> inside text",
]


def projected(features: torch.Tensor | object) -> torch.Tensor:
    """transformers 5 may return an output object from get_*_features: take its projected pooler output."""
    return features if isinstance(features, torch.Tensor) else features.pooler_output


@pytest.fixture(scope="module")
def flickr_captions(capeval_test_data: Path) -> list[str]:
    lines = (capeval_test_data / "flickr8k" / "Flickr8k.token.txt").read_text(encoding="utf-8").splitlines()
    return [line.split("\t", 1)[1] for line in lines[::16]]


@pytest.fixture(scope="module")
def parity_inputs(capeval_test_data: Path, flickr_captions: list[str]) -> tuple[list[Path], list[str]]:
    """Original Flickr8k image files and texts the converted and original models must embed alike."""
    images = [capeval_test_data / "flickr8k" / "images_original" / name for name in IMAGE_NAMES]
    return images, flickr_captions[:6] + [LONG_CAPTION]


def original_image_transform(arch: str):
    if arch == "openai":
        return clip.clip._transform(224)
    return open_clip.image_transform(224, is_train=False, mean=INCEPTION_MEAN, std=INCEPTION_STD)


def assert_same_embeddings(original: torch.nn.Module, hf_dir: Path, arch: str,
                           inputs: tuple[list[Path], list[str]]) -> None:
    images, texts = inputs
    transform = original_image_transform(arch)
    pixels = torch.stack([transform(Image.open(path)) for path in images])
    tokens = clip.tokenize(texts, truncate=True)
    converted = CLIPModel.from_pretrained(hf_dir).eval()
    with torch.no_grad():
        expected_image, expected_text = original.encode_image(pixels), original.encode_text(tokens)
        image = projected(converted.get_image_features(pixel_values=pixels))
        text = projected(converted.get_text_features(input_ids=tokens))
    assert expected_image.abs().mean() > 0.1 and expected_text.abs().mean() > 0.1
    torch.testing.assert_close(image, expected_image, rtol=0, atol=1e-5)
    torch.testing.assert_close(text, expected_text, rtol=0, atol=1e-5)


def test_long_caption_is_truncated_by_clip_tokenize() -> None:
    assert len(clip.simple_tokenizer.SimpleTokenizer().encode(LONG_CAPTION)) > 75


@pytest.mark.parametrize("variant", ["state_dict", "torchscript", "pacs", "pacs_module_prefix"])
def test_openai_formats_match_original(variant: str, tiny_openai_clip: TinyClip, tmp_path: Path,
                                       parity_inputs: tuple[list[Path], list[str]]) -> None:
    model = tiny_openai_clip.model
    if variant == "state_dict":
        checkpoint = tiny_openai_clip.checkpoint
    elif variant == "torchscript":
        checkpoint = save_torchscript_archive(model, tmp_path / "openai_jit.pt")
    else:
        checkpoint = save_pacs_checkpoint(model, tmp_path / "pacs.pth", module_prefix=variant == "pacs_module_prefix")
    arch = None if variant == "torchscript" else "openai"  # TorchScript archives are recognised as OpenAI's
    hf_dir = convert_checkpoint(checkpoint, tmp_path / "hf", arch=arch)
    assert CLIPModel.from_pretrained(hf_dir).config.text_config.hidden_act == "quick_gelu"
    assert_same_embeddings(model, hf_dir, "openai", parity_inputs)


@pytest.mark.parametrize("variant", ["state_dict", "pacs"])
def test_openclip_formats_match_original(variant: str, tiny_openclip: TinyClip, tmp_path: Path,
                                         parity_inputs: tuple[list[Path], list[str]]) -> None:
    if variant == "state_dict":
        checkpoint = tiny_openclip.checkpoint
    else:
        checkpoint = save_pacs_checkpoint(tiny_openclip.model, tmp_path / "pacs.pth")
    hf_dir = convert_checkpoint(checkpoint, tmp_path / "hf", arch="openclip")
    assert CLIPModel.from_pretrained(hf_dir).config.vision_config.hidden_act == "gelu"
    assert_same_embeddings(tiny_openclip.model, hf_dir, "openclip", parity_inputs)


def test_fixture_folders_match_their_models(tiny_openai_clip: TinyClip, tiny_openclip: TinyClip,
                                            parity_inputs: tuple[list[Path], list[str]]) -> None:
    assert_same_embeddings(tiny_openai_clip.model, tiny_openai_clip.hf_dir, "openai", parity_inputs)
    assert_same_embeddings(tiny_openclip.model, tiny_openclip.hf_dir, "openclip", parity_inputs)


def test_wrong_arch_changes_embeddings(tiny_openclip: TinyClip, tmp_path: Path) -> None:
    hf_dir = convert_checkpoint(tiny_openclip.checkpoint, tmp_path / "hf", arch="openai")
    tokens = clip.tokenize(["a dog runs on the grass"])
    with torch.no_grad():
        expected = tiny_openclip.model.encode_text(tokens)
        text = projected(CLIPModel.from_pretrained(hf_dir).eval().get_text_features(input_ids=tokens))
    assert (text - expected).abs().max() > 1e-3


def test_preprocessor_config(tiny_openai_clip: TinyClip, tiny_openclip: TinyClip, tmp_path: Path) -> None:
    for tiny, mean, std in ((tiny_openai_clip, OPENAI_MEAN, OPENAI_STD), (tiny_openclip, INCEPTION_MEAN, INCEPTION_STD)):
        config = json.loads((tiny.hf_dir / "preprocessor_config.json").read_text())
        assert (config["image_mean"], config["image_std"]) == (list(mean), list(std))
        assert config["size"] == {"shortest_edge": 224}
        assert config["crop_size"] == {"height": 224, "width": 224}
        assert config["resample"] == 3
        assert list(CLIPImageProcessor.from_pretrained(tiny.hf_dir).image_mean) == list(mean)
    overridden = convert_checkpoint(tiny_openclip.checkpoint, tmp_path / "hf", arch="openclip",
                                    normalization="openai")
    assert json.loads((overridden / "preprocessor_config.json").read_text())["image_mean"] == list(OPENAI_MEAN)


def test_arch_is_required_when_ambiguous(tiny_openai_clip: TinyClip, tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="pass arch"):
        convert_checkpoint(tiny_openai_clip.checkpoint, tmp_path / "hf")
    with pytest.raises(CheckpointError, match="not those of ViT-B-32"):
        convert_checkpoint(tiny_openai_clip.checkpoint, tmp_path / "hf", model_name="ViT-B-32")


def test_missing_and_unexpected_keys_are_listed(tiny_openai_clip: TinyClip, tmp_path: Path) -> None:
    state_dict = tiny_openai_clip.model.state_dict()
    broken = {key: value for key, value in state_dict.items()
              if key not in ("ln_final.bias", "transformer.resblocks.1.mlp.c_fc.weight")}
    broken["visual.extra.weight"] = torch.zeros(3)
    broken["attn_mask"] = torch.zeros(77, 77)  # non-weight buffer: skipped, not reported
    path = tmp_path / "broken.pt"
    torch.save(broken, path)
    with pytest.raises(CheckpointError) as error:
        convert_checkpoint(path, tmp_path / "hf", arch="openai")
    message = str(error.value)
    assert "'ln_final.bias'" in message and "'transformer.resblocks.1.mlp.c_fc.weight'" in message
    assert "unexpected keys ['visual.extra.weight']" in message


def test_wrong_shape_is_reported(tiny_openai_clip: TinyClip) -> None:
    state_dict = dict(tiny_openai_clip.model.state_dict())
    config = clip_config_from_state_dict(state_dict, "openai")
    state_dict["visual.ln_post.bias"] = torch.zeros(5)
    with pytest.raises(CheckpointError, match=r"visual\.ln_post\.bias -> vision_model\.post_layernorm\.bias"):
        convert_state_dict(state_dict, config)


class NotATensor:
    """An arbitrary class: unpickling it needs code execution, which weights_only refuses."""


def test_pickled_objects_are_refused(tiny_openai_clip: TinyClip, tmp_path: Path) -> None:
    path = tmp_path / "evil.pth"
    torch.save({"state_dict": tiny_openai_clip.model.state_dict(), "extra": NotATensor()}, path)
    with pytest.raises(CheckpointError, match="refused"):
        convert_checkpoint(path, tmp_path / "hf", arch="openai")
    path = tmp_path / "garbage.pth"
    path.write_bytes(b"not a torch.save file")
    with pytest.raises(CheckpointError, match="garbage.pth"):
        convert_checkpoint(path, tmp_path / "hf", arch="openai")
    path = tmp_path / "not_tensors.pth"
    torch.save({"state_dict": {**tiny_openai_clip.model.state_dict(), "epoch": 3}}, path)
    with pytest.raises(CheckpointError, match=r"not tensors: \['epoch'\]"):
        convert_checkpoint(path, tmp_path / "hf", arch="openai")


def test_command_line(tiny_openai_clip: TinyClip, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli"
    assert main(["--checkpoint", str(tiny_openai_clip.checkpoint), "--out", str(out), "--arch", "openai"]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert (out / "model.safetensors").is_file()
    assert main(["--checkpoint", str(tmp_path / "absent.pt"), "--out", str(out)]) == 1
    assert "absent.pt" in capsys.readouterr().err


def openai_clean(text: str) -> str:
    return clip.simple_tokenizer.whitespace_clean(clip.simple_tokenizer.basic_clean(text)).lower()


def test_tokenizer_matches_openai(tiny_openai_clip: TinyClip, flickr_captions: list[str]) -> None:
    texts = [openai_clean(text) for text in flickr_captions + TRICKY_TEXTS + [LONG_CAPTION]]
    assert len(flickr_captions) >= 2000
    openai_tokenizer = clip.simple_tokenizer.SimpleTokenizer()
    tokenizer = AutoTokenizer.from_pretrained(tiny_openai_clip.hf_dir)
    vocab = json.loads((tiny_openai_clip.hf_dir / "vocab.json").read_text(encoding="utf-8"))
    assert vocab == openai_tokenizer.encoder
    produced = tokenizer(texts, truncation=False)["input_ids"]
    mismatches = []
    for text, ids in zip(texts, produced):
        expected = [49406] + openai_tokenizer.encode(text) + [49407]
        if ids != expected:
            mismatches.append(text)
        if len(expected) <= 77:
            assert clip.tokenize(text, truncate=False)[0, :len(expected)].tolist() == ids
    assert mismatches == []


def assert_converts_on_meta(state_dict: dict[str, torch.Tensor], config: CLIPConfig) -> None:
    converted = convert_state_dict(state_dict, config)
    with torch.device("meta"):
        expected = CLIPModel(config).state_dict()
    assert sorted(converted) == sorted(expected)


def test_config_of_full_size_openai_vit_b_32() -> None:
    with torch.device("meta"):
        model = clip.model.CLIP(512, 224, 12, 768, 32, 77, 49408, 512, 8, 12)
    state_dict = model.state_dict()
    config = clip_config_from_state_dict(state_dict, "openai")
    vision, text = config.vision_config, config.text_config
    assert config.projection_dim == 512
    assert (vision.hidden_size, vision.num_hidden_layers, vision.num_attention_heads) == (768, 12, 12)
    assert (vision.patch_size, vision.image_size, vision.intermediate_size) == (32, 224, 3072)
    assert (text.hidden_size, text.num_hidden_layers, text.num_attention_heads) == (512, 12, 8)
    assert (text.vocab_size, text.max_position_embeddings, text.intermediate_size) == (49408, 77, 2048)
    assert vision.hidden_act == text.hidden_act == "quick_gelu"
    assert_converts_on_meta(state_dict, config)


def test_config_of_full_size_openclip_vit_l_14() -> None:
    model_config = open_clip.get_model_config("ViT-L-14")
    with torch.device("meta"):
        model = open_clip.model.CLIP(model_config["embed_dim"], open_clip.model.CLIPVisionCfg(**model_config["vision_cfg"]),
                                     open_clip.model.CLIPTextCfg(**model_config["text_cfg"]), quick_gelu=False)
    state_dict = model.state_dict()
    config = clip_config_from_state_dict(state_dict, "openclip")
    vision, text = config.vision_config, config.text_config
    assert config.projection_dim == 768
    assert (vision.hidden_size, vision.num_hidden_layers, vision.num_attention_heads) == (1024, 24, 16)
    assert (vision.patch_size, vision.image_size, vision.intermediate_size) == (14, 224, 4096)
    assert (text.hidden_size, text.num_hidden_layers, text.num_attention_heads) == (768, 12, 12)
    assert vision.hidden_act == text.hidden_act == "gelu"
    assert_converts_on_meta(state_dict, config)


def test_transformers_tokenizer_padding_and_truncation_pool_at_end_token(tiny_openai_clip: TinyClip,
                                                                          parity_inputs: tuple[list[Path], list[str]]
                                                                          ) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_openai_clip.hf_dir)
    texts = [openai_clean(text) for text in parity_inputs[1]]
    batch = tokenizer(texts, padding="max_length", truncation=True, max_length=77, return_tensors="pt")
    reference_tokens = clip.tokenize(texts, truncate=True)
    assert torch.equal(batch["input_ids"][:, :2], reference_tokens[:, :2])
    assert batch["input_ids"][-1].tolist() == reference_tokens[-1].tolist()  # the > 77 token caption
    converted = CLIPModel.from_pretrained(tiny_openai_clip.hf_dir).eval()
    with torch.no_grad():
        expected = tiny_openai_clip.model.encode_text(reference_tokens)
        text = projected(converted.get_text_features(**batch))
    torch.testing.assert_close(text, expected, rtol=0, atol=1e-5)

"""BRIDGE: text tower on embeddings, losses against a float64 re-derivation, templates token by token, the score."""
from __future__ import annotations

import math
from pathlib import Path
from typing import List

import numpy as np
import pytest
import torch

from capeval import BRIDGEScore, CLIPScore, InputError, ModelNotAvailableError
from capeval.inputs import iter_scoring_items
from capeval.models.bridge import templates as templates_module
from capeval.models.bridge.losses import LossWeights, bridge_losses
from capeval.models.bridge.modeling import TemplateBatch
from capeval.models.bridge.templates import NounChunker, build_templates
from capeval.models.clip.loading import load_backbone
from capeval.models.clip.modeling import (
    image_grid_states,
    pooled_image_states,
    pooled_text_states,
    pooled_text_states_from_embeddings,
)
from capeval.models.clip.preprocessing import clean_text, pad_token_ids
from fixtures.bridge_models import (US, make_tiny_blip, make_tiny_bridge, synthetic_images, tiny_bridge_config,
                                    word_tagger, write_fixed_caption)
from fixtures.paths import REPO_ROOT

CAPTIONS = ["a man running with a white dog", "two dogs plays with a red ball on the grass",
            "a young woman riding a bike down the street", "the black car"]


@pytest.fixture(scope="module")
def tiny_bridge(tiny_openai_clip, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bridge")
    blip = make_tiny_blip(root / "blip")
    return make_tiny_bridge(root / "bridge", tiny_bridge_config(tiny_openai_clip.hf_dir, blip))


# -- CLIP text tower on embeddings -------------------------------------------------------------------------------
def test_text_tower_on_embeddings_equals_token_id_path(tiny_openai_clip) -> None:
    backbone = load_backbone(tiny_openai_clip.hf_dir, device="cpu")
    transform, text_model = backbone.text_transform, backbone.model.text_model
    ids = pad_token_ids(transform.tokenize(transform.prepare(CAPTIONS, "A photo depicts ")))
    rows = (ids == transform.end_token_id).int().argmax(dim=1)
    with torch.no_grad():
        from_ids = pooled_text_states(text_model, ids, transform.end_token_id)
        embeddings = text_model.embeddings.token_embedding(ids)
        pruned = pooled_text_states_from_embeddings(text_model, embeddings, rows)
        expected = text_model(input_ids=ids).pooler_output
    differentiable_input = embeddings.clone().requires_grad_(True)
    differentiable = pooled_text_states_from_embeddings(text_model, differentiable_input, rows)
    assert torch.equal(pruned, from_ids)
    torch.testing.assert_close(differentiable.detach(), from_ids, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(from_ids, expected, rtol=1e-5, atol=1e-5)
    differentiable.sum().backward()
    gradient = differentiable_input.grad
    assert gradient[0, : rows[0] + 1].abs().sum() > 0
    assert gradient[0, rows[0] + 1:].abs().sum() == 0  # causal: positions after the end token do not count


def test_grid_class_token_is_the_pooled_image_state(tiny_openai_clip) -> None:
    vision = load_backbone(tiny_openai_clip.hf_dir, device="cpu").model.vision_model
    pixels = torch.randn(3, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        grid = image_grid_states(vision, pixels)
        reference = vision.post_layernorm(vision(pixel_values=pixels).last_hidden_state)
        pooled = pooled_image_states(vision, pixels)
    assert grid.shape == (3, 50, vision.config.hidden_size)
    torch.testing.assert_close(grid, reference, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grid[:, 0], pooled, rtol=1e-5, atol=1e-5)


# -- losses --------------------------------------------------------------------------------------------------------
def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / math.sqrt((a @ a) * (b @ b)))


def _paper_weighted_loss(anchors: np.ndarray, pseudo: List[List[np.ndarray]], tau: float) -> float:
    """Eq. 5 of the paper, term by term, in float64 loops."""
    counts = [len(rows) for rows in pseudo]
    total = sum(counts)
    first = second = 0.0
    for i, rows in enumerate(pseudo):
        for t_ij in rows:
            numerator = math.exp(_cos(anchors[i], t_ij) / tau)
            to_anchors = sum(counts[k] * math.exp(_cos(anchors[k], t_ij) / tau)
                             for k in range(len(pseudo)) if k != i)
            to_pseudo = sum(math.exp(_cos(anchors[i], t_kh) / tau)
                            for k in range(len(pseudo)) if k != i for t_kh in pseudo[k])
            first -= math.log(numerator / to_anchors) / total
            second -= counts[i] * math.log(numerator / to_pseudo) / total
    return first + second


def _symmetric_info_nce(left: np.ndarray, right: np.ndarray, tau: float) -> float:
    logits = np.array([[_cos(a, b) / tau for b in right] for a in left])
    rows = -np.mean([logits[m, m] - math.log(np.exp(logits[m]).sum()) for m in range(len(left))])
    columns = -np.mean([logits[m, m] - math.log(np.exp(logits[:, m]).sum()) for m in range(len(left))])
    return (rows + columns) / 2


def test_losses_equal_the_papers_formulas_in_float64() -> None:
    generator = np.random.default_rng(5)
    counts = [3, 1, 2, 2]
    dim, tau = 6, 0.3
    images = generator.normal(size=(4, dim))
    captions = generator.normal(size=(4, dim))
    pseudo = [[generator.normal(size=dim) for _ in range(count)] for count in counts]
    regularized = generator.normal(size=(sum(counts), dim))
    prompts = generator.normal(size=(sum(counts), dim))
    owner = torch.tensor([i for i, count in enumerate(counts) for _ in range(count)])
    flat = torch.tensor(np.stack([row for rows in pseudo for row in rows]))
    settings = LossWeights(image=0.01, caption=1.0, regularization=0.01, temperature=tau)
    losses = bridge_losses(torch.tensor(images), torch.tensor(captions), flat, torch.tensor(regularized),
                           torch.tensor(prompts), owner, torch.tensor(counts), settings)
    l1 = _paper_weighted_loss(images, pseudo, tau)
    l2 = _paper_weighted_loss(captions, pseudo, tau)
    l3 = _symmetric_info_nce(regularized, prompts, tau)
    assert losses["l1"].item() == pytest.approx(l1, rel=1e-12)
    assert losses["l2"].item() == pytest.approx(l2, rel=1e-12)
    assert losses["l3"].item() == pytest.approx(l3, rel=1e-12)
    assert losses["loss"].item() == pytest.approx(0.01 * l1 + 1.0 * l2 + 0.01 * l3, rel=1e-12)
    with pytest.raises(ValueError, match="at least two images"):
        bridge_losses(torch.tensor(images[:1]), torch.tensor(captions[:1]), flat[:3], torch.tensor(regularized[:3]),
                      torch.tensor(prompts[:3]), owner[:3], torch.tensor(counts[:1]), settings)


# -- templates -------------------------------------------------------------------------------------------------------
def test_noun_chunks_keep_determiners_outside_the_mask() -> None:
    chunker = NounChunker(tagger=word_tagger())
    assert [chunk.text for chunk in chunker.chunks(CAPTIONS[0])] == ["man", "white dog"]
    assert [chunk.text for chunk in chunker.chunks(CAPTIONS[1])] == ["dogs", "red ball", "grass"]
    assert [chunk.text for chunk in chunker.chunks("is with on")] == []


def test_templates_and_splicing_token_by_token(tiny_bridge) -> None:
    scorer = BRIDGEScore(model=tiny_bridge, device="cpu", tagger=word_tagger())
    transform, model = scorer.bridge.backbone.text_transform, scorer.bridge.model
    chunker = NounChunker(tagger=word_tagger())
    for caption in CAPTIONS:
        full = transform.tokenize([clean_text(caption)])[0]
        templates = build_templates(caption, chunker, transform, US)
        assert [template.chunk for template in templates] == [chunk.text for chunk in chunker.chunks(caption)]
        for template in templates:
            chunk_ids = transform.tokenizer(template.chunk, add_special_tokens=False)["input_ids"]
            start = template.masked.index(True)
            assert template.masked[start:start + US] == (True,) * US and sum(template.masked) == US
            kept = [token for token, masked in zip(template.token_ids, template.masked) if not masked]
            assert kept[:start] + list(chunk_ids) + kept[start:] == full  # the chunk's tokens, and only them, masked
            assert all(template.token_ids[i] == 0 for i in range(start, start + US))

    templates = build_templates(CAPTIONS[1], chunker, transform, US)
    batch = TemplateBatch.collate(templates, [0, 1, 0])
    grid = model.image_grid(torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(2)))
    with torch.no_grad():
        outputs = model.pseudo_tokens(grid, batch)
        embeddings = model.pseudo_caption_embeddings(grid, batch)
        token_embedding = model.clip.text_model.embeddings.token_embedding
        spliced = torch.zeros(len(templates), batch.token_ids.shape[1], token_embedding.embedding_dim)
        for row, template in enumerate(templates):  # token by token
            for position, (token, masked) in enumerate(zip(template.token_ids, template.masked)):
                spliced[row, position] = outputs[row, position] if masked else token_embedding.weight[token]
        expected = model.clip.text_projection(pooled_text_states_from_embeddings(
            model.clip.text_model, spliced, batch.end_rows))
    torch.testing.assert_close(embeddings, expected, rtol=1e-6, atol=1e-6)
    other_image = TemplateBatch.collate(templates, [1, 0, 1])
    with torch.no_grad():
        assert not torch.allclose(model.pseudo_caption_embeddings(grid, other_image), embeddings)


def test_a_caption_without_chunks_gives_its_unmasked_template(tiny_openai_clip) -> None:
    transform = load_backbone(tiny_openai_clip.hf_dir, device="cpu").text_transform
    (template,) = build_templates("Is with ON", NounChunker(tagger=word_tagger()), transform, US)
    assert template.chunk == "" and not any(template.masked)
    assert list(template.token_ids) == transform.tokenize(["is with on"])[0]


# -- the score -------------------------------------------------------------------------------------------------------
def test_score_is_half_clip_s_plus_weighted_pseudo_caption_cosine(tiny_bridge, tiny_openai_clip) -> None:
    images = synthetic_images(4)
    candidates = ["a man with a dog", "a red car on the street", "two dogs", "a picture of grass"]
    scorer = BRIDGEScore(model=tiny_bridge, device="cpu", tagger=word_tagger())
    # the random captioner's own captions may have no noun chunk (as with some transformers versions): it writes
    # a caption with two, each masked in its own template
    write_fixed_caption(scorer.engine.producers["template"].captioner, "the man with a white dog")
    result = scorer.score(images, candidates)
    assert scorer.engine.producers["pseudo_caption"].without_chunks == 0
    clip_s = np.array(CLIPScore(model=tiny_openai_clip.hf_dir, device="cpu").score(images, candidates)["clip_scores"])

    chunk = next(iter_scoring_items(images, candidates, None, 10))
    model, backbone = scorer.bridge.model, scorer.bridge.backbone
    chunker = NounChunker(tagger=word_tagger())
    transform = backbone.text_transform
    captions = transform.tokenize(transform.prepare(candidates, "A photo depicts "))
    with torch.no_grad():
        texts = backbone.encode_texts(pad_token_ids(captions)).double()
        pixels = torch.stack([backbone.image_transform.to_uint8(image, "image") for image in images])
        grid = model.image_grid(backbone.image_transform.normalize(pixels))
    expected = []
    blip_captions = scorer.engine.templates(chunk.images)
    assert blip_captions == ["the man with a white dog"] * len(images)
    for index, caption in enumerate(blip_captions):
        templates = build_templates(caption, chunker, transform, US)
        assert [template.chunk for template in templates] == ["man", "white dog"]
        with torch.no_grad():
            pseudo = model.pseudo_caption_embeddings(grid[index:index + 1],
                                                     TemplateBatch.collate(templates, [0] * len(templates)))
        mean = torch.nn.functional.normalize(pseudo.double(), dim=-1).mean(dim=0)
        cosine = torch.nn.functional.cosine_similarity(mean, texts[index], dim=0).item()
        expected.append(0.5 * (clip_s[index] + 2.5 * max(cosine, 0.0)))
    np.testing.assert_allclose(result["bridge_scores"], expected, rtol=1e-5)
    assert result["bridge_score"] == pytest.approx(np.mean(result["bridge_scores"]), rel=1e-12)
    assert len(set(np.round(result["bridge_scores"], 6))) == 4
    for field in ("captioner:", "grammar:", "tagger:test-unigram-tagger", "unit_size:3", "normalize_before_mean:True",
                  "w:2.5", "prompt:'A photo depicts '"):
        assert field in result["signature"]


def test_templates_and_t_star_are_cached_per_image(tiny_bridge, tmp_path) -> None:
    images = synthetic_images(3)
    first = BRIDGEScore(model=tiny_bridge, device="cpu", tagger=word_tagger(), cache_dir=tmp_path)
    result = first.score(images + images[:1], ["a dog"] * 4)
    assert first.engine.encoded["template"] == 3 and first.engine.encoded["pseudo_caption"] == 3
    second = BRIDGEScore(model=tiny_bridge, device="cpu", tagger=word_tagger(), cache_dir=tmp_path)
    assert second.score(images + images[:1], ["a dog"] * 4) == result
    assert second.engine.encoded["template"] == 0 and second.engine.encoded["pseudo_caption"] == 0


def test_references_are_refused(tiny_bridge) -> None:
    scorer = BRIDGEScore(model=tiny_bridge, device="cpu", tagger=word_tagger())
    with pytest.raises(InputError, match="reference-free"):
        scorer.score(synthetic_images(1), ["a dog"], [["a dog"]])


def test_evaluate_module_equals_the_scorer(tiny_bridge, monkeypatch: pytest.MonkeyPatch) -> None:
    import evaluate

    monkeypatch.setattr(templates_module, "perceptron_tagger", word_tagger)  # the default tagger, made offline
    module = evaluate.load(str(REPO_ROOT / "metrics" / "bridge"))
    images, candidates = synthetic_images(2), ["a dog", "a red car"]
    result = module.compute(predictions=candidates, images=images, model=str(tiny_bridge), device="cpu")
    assert module.name == "bridge_score"
    expected = BRIDGEScore(model=tiny_bridge, device="cpu").score(images, candidates)
    assert result == expected


def test_missing_tagger_data_offline_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import nltk

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotAvailableError, match="averaged_perceptron_tagger_eng"):
        NounChunker().chunks("a man with a dog")

"""capeval/models/clip/modeling.py: the pruned tower forwards return transformers' pooled outputs."""
from __future__ import annotations

import pytest
import torch
from transformers import CLIPModel

from capeval.models.clip.preprocessing import pad_token_ids
from capeval.models.clip.modeling import pooled_image_states, pooled_text_states, text_token_states

START_TOKEN, END_TOKEN = 49406, 49407
CAPTIONS = ["a dog", "two people ride bicycles along a river at sunset while a boat passes",
            "a cat sleeps", "x " * 100, "a red car parked in front of an old brick house"]


@pytest.fixture(scope="module", params=["tiny_openai_clip", "tiny_openclip"])
def hf_model(request: pytest.FixtureRequest) -> CLIPModel:
    """The converted tiny model of each original architecture (QuickGELU and exact GELU)."""
    return CLIPModel.from_pretrained(request.getfixturevalue(request.param).hf_dir).eval()


def _token_ids(model: CLIPModel) -> torch.Tensor:
    """Zero-padded random ids, one row per caption of CAPTIONS' word count (the long one filling the context), each
    between start and end tokens."""
    generator = torch.Generator().manual_seed(3)
    context = model.config.text_config.max_position_embeddings
    rows = []
    for caption in CAPTIONS:
        body = torch.randint(1, START_TOKEN, (min(len(caption.split()), context - 2),), generator=generator).tolist()
        rows.append([START_TOKEN] + body + [END_TOKEN])
    return pad_token_ids(rows)


def test_image_states_equal_transformers(hf_model: CLIPModel) -> None:
    pixels = torch.randn(5, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        expected = hf_model.vision_model(pixel_values=pixels).pooler_output
        pooled = pooled_image_states(hf_model.vision_model, pixels)
        single = pooled_image_states(hf_model.vision_model, pixels[2:3])
    assert pooled.shape == expected.shape == (5, hf_model.config.vision_config.hidden_size)
    assert expected.std() > 0.1  # not a degenerate output
    torch.testing.assert_close(pooled, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(single[0], expected[2], rtol=1e-5, atol=1e-5)


def test_text_states_equal_transformers(hf_model: CLIPModel) -> None:
    ids = _token_ids(hf_model)
    with torch.inference_mode():
        expected = hf_model.text_model(input_ids=ids).pooler_output
        pooled = pooled_text_states(hf_model.text_model, ids, END_TOKEN)
    lengths = (ids != 0).sum(dim=1)
    assert lengths.max() == hf_model.config.text_config.max_position_embeddings
    assert len(set(lengths.tolist())) == len(CAPTIONS)  # end tokens at different positions, padding of many lengths
    assert expected.std() > 0.1
    torch.testing.assert_close(pooled, expected, rtol=1e-5, atol=1e-5)


def test_text_token_states_equal_transformers_at_every_position(hf_model: CLIPModel) -> None:
    """EMScore's per-token states: transformers' (final-layer-normed) last hidden state at every position up to each
    row's end token (where the pooled state is), whatever the padding after it."""
    ids = _token_ids(hf_model)
    with torch.inference_mode():
        outputs = hf_model.text_model(input_ids=ids)
        expected = outputs.last_hidden_state  # transformers applies the final layer norm to it
        tokens = text_token_states(hf_model.text_model, ids)
        alone = text_token_states(hf_model.text_model, ids[1:2, : int((ids[1] != 0).sum())])
    ends = (ids == END_TOKEN).int().argmax(dim=1)
    assert tokens.shape == expected.shape
    for row, end in enumerate(ends.tolist()):
        torch.testing.assert_close(tokens[row, : end + 1], expected[row, : end + 1], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(tokens[row, end], outputs.pooler_output[row], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(alone[0], tokens[1, : alone.shape[1]], rtol=1e-5, atol=1e-5)


def test_text_states_ignore_positions_after_the_end_token(hf_model: CLIPModel) -> None:
    ids = _token_ids(hf_model)
    garbage = ids.clone()
    after_end = torch.arange(ids.shape[1])[None, :] > (ids == END_TOKEN).int().argmax(dim=1)[:, None]
    garbage[after_end] = 7
    assert after_end.any()
    with torch.inference_mode():
        torch.testing.assert_close(pooled_text_states(hf_model.text_model, garbage, END_TOKEN),
                                   pooled_text_states(hf_model.text_model, ids, END_TOKEN), rtol=0, atol=1e-6)


def test_text_rows_without_end_token_are_refused(hf_model: CLIPModel) -> None:
    ids = torch.tensor([[5, 6, 7], [5, 6, 0]])
    with pytest.raises(ValueError, match="end token 9"):
        pooled_text_states(hf_model.text_model, ids, 9)


def test_half_precision_matches_transformers_half(tiny_openai_clip) -> None:
    model = CLIPModel.from_pretrained(tiny_openai_clip.hf_dir).to(torch.float16).eval()
    pixels = torch.randn(3, 3, 224, 224, generator=torch.Generator().manual_seed(1)).half()
    with torch.inference_mode():
        expected = model.vision_model(pixel_values=pixels).pooler_output
        pooled = pooled_image_states(model.vision_model, pixels)
    assert pooled.dtype == torch.float16
    torch.testing.assert_close(pooled, expected, rtol=2e-3, atol=2e-3)

"""hub_models/capeval/vilbert-multi-task: card front matter, the paper's numbers, and the config of the original."""
from __future__ import annotations

from huggingface_hub.repocard_data import model_index_to_eval_results

from capeval.models.vilbert import VilbertConfig
from conversion.vilbert_converter import config_from_original
from conversion.publish import ORIGINAL_SHA256_PATTERN, read_front_matter
from fixtures.paths import REPO_ROOT

FOLDER = REPO_ROOT / "hub_models" / "capeval" / "vilbert-multi-task"

# vilbert-multi-task's config/bert_base_6layer_6conect.json, the config of multi_task_model.bin
ORIGINAL_CONFIG = {
    "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": 768,
    "initializer_range": 0.02, "intermediate_size": 3072, "max_position_embeddings": 512, "num_attention_heads": 12,
    "num_hidden_layers": 12, "type_vocab_size": 2, "vocab_size": 30522, "v_feature_size": 2048,
    "v_target_size": 1601, "v_hidden_size": 1024, "v_num_hidden_layers": 6, "v_num_attention_heads": 8,
    "v_intermediate_size": 1024, "bi_hidden_size": 1024, "bi_num_attention_heads": 8, "bi_intermediate_size": 1024,
    "bi_attention_type": 1, "v_attention_probs_dropout_prob": 0.1, "v_hidden_act": "gelu",
    "v_hidden_dropout_prob": 0.1, "v_initializer_range": 0.02, "v_biattention_id": [0, 1, 2, 3, 4, 5],
    "t_biattention_id": [6, 7, 8, 9, 10, 11], "pooling_method": "mul",
}

# Lee et al. (2020), Table 1, rows ViLBERTScore*P/R/F (12-in-1 model): Kendall tau on Flickr8k and Composite
PAPER_TABLE_1 = {
    ("Flickr8k-Expert", "ViLBERTScore-P (12-in-1) Kendall tau"): 0.541,
    ("Flickr8k-Expert", "ViLBERTScore-R (12-in-1) Kendall tau"): 0.512,
    ("Flickr8k-Expert", "ViLBERTScore-F (12-in-1) Kendall tau"): 0.542,
    ("Composite", "ViLBERTScore-P (12-in-1) Kendall tau"): 0.499,
    ("Composite", "ViLBERTScore-R (12-in-1) Kendall tau"): 0.508,
    ("Composite", "ViLBERTScore-F (12-in-1) Kendall tau"): 0.514,
}


def test_card_front_matter_and_numbers() -> None:
    metadata = read_front_matter(FOLDER / "README.md")
    assert metadata["license"] == "mit" and {"vilbertscore", "capeval"} <= set(metadata["tags"])
    model_name, eval_results = model_index_to_eval_results(metadata["model-index"])
    assert model_name == "vilbert-multi-task"
    found = {(result["dataset"]["name"], metric["name"]): metric["value"]
             for result in metadata["model-index"][0]["results"] for metric in result["metrics"]}
    assert found == PAPER_TABLE_1 and len(eval_results) == len(PAPER_TABLE_1)
    assert len(ORIGINAL_SHA256_PATTERN.findall((FOLDER / "README.md").read_text(encoding="utf-8"))) == 1


def test_config_is_the_converted_original_config() -> None:
    converted = config_from_original(ORIGINAL_CONFIG, task_specific_tokens=True)
    assert VilbertConfig.load(FOLDER) == converted == VilbertConfig()
    assert converted.num_text_layers_used == 11 and converted.num_visual_layers_used == 5

"""BRIDGE training end to end on synthetic COCO-format data with a tiny CLIP and a tiny BLIP: the loss decreases,
resuming continues bit-identically, save/load keeps the scores, and two processes follow the one-process loss curve."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from capeval import BRIDGEScore, InputError
from capeval.configuration import ConfigError
from capeval.training.bridge import BridgeTrainer, TrainingConfig
from fixtures.bridge_models import TAGGED_WORDS, make_tiny_blip, synthetic_images, tiny_bridge_config, word_tagger
from fixtures.paths import TESTS_DIR

NOUNS = [word for word, tag in TAGGED_WORDS.items() if tag.startswith("NN")]
ADJECTIVES = [word for word, tag in TAGGED_WORDS.items() if tag == "JJ"]


@pytest.fixture(scope="module")
def coco(tmp_path_factory: pytest.TempPathFactory, tiny_openai_clip) -> dict:
    """8 synthetic training images with 2 captions each, in Karpathy's layout, and a tiny BLIP."""
    root = tmp_path_factory.mktemp("coco")
    (root / "images" / "train2014").mkdir(parents=True)
    generator = np.random.default_rng(3)
    entries = []
    for index, image in enumerate(synthetic_images(8, seed=4)):
        name = f"img{index}.png"
        image.save(root / "images" / "train2014" / name)
        captions = [f"a {generator.choice(ADJECTIVES)} {generator.choice(NOUNS)} with a {generator.choice(NOUNS)}"
                    for _ in range(2)]
        entries.append({"filepath": "train2014", "filename": name, "split": "train" if index % 2 else "restval",
                        "sentences": [{"raw": caption} for caption in captions]})
    entries.append({"filepath": "val2014", "filename": "unused.png", "split": "val", "sentences": [{"raw": "x"}]})
    (root / "dataset_coco.json").write_text(json.dumps({"images": entries}))
    return {"root": root, "blip": make_tiny_blip(root / "blip"), "clip": tiny_openai_clip.hf_dir}


def training_config(coco: dict, output: Path, **overrides) -> TrainingConfig:
    settings = dict(annotations=str(coco["root"] / "dataset_coco.json"), images=str(coco["root"] / "images"),
                    output_dir=str(output), model=tiny_bridge_config(coco["clip"], coco["blip"]), epochs=4,
                    batch_size=4, learning_rate=1e-3, checkpoint_every=2, num_workers=0, seed=11)
    settings.update(overrides)
    return TrainingConfig(**settings)


def test_training_decreases_the_loss_and_resumes_bit_identically(coco: dict, tmp_path: Path) -> None:
    straight = BridgeTrainer(training_config(coco, tmp_path / "straight"), tagger=word_tagger())
    assert straight.steps_per_epoch == 2 and straight.without_chunks == 0
    model_dir = straight.train()
    losses = [entry["loss"] for entry in straight.history]
    assert len(losses) == 8
    assert np.mean(losses[-2:]) < np.mean(losses[:2])  # one epoch at the end vs one at the start

    interrupted = tmp_path / "resumed"
    BridgeTrainer(training_config(coco, interrupted, max_steps=3), tagger=word_tagger()).train()
    resumed = BridgeTrainer(training_config(coco, interrupted), tagger=word_tagger())
    resumed.train()
    assert resumed.history == straight.history
    final, again = load_file(str(model_dir / "model.safetensors")), load_file(str(interrupted / "model" /
                                                                               "model.safetensors"))
    assert final.keys() == again.keys() and all(torch.equal(final[name], again[name]) for name in final)

    card = json.loads((model_dir / "run_card.json").read_text())
    assert card["config"]["learning_rate"] == 1e-3 and card["config"]["model"]["templates"]["unit_size"] == 3
    assert card["data"]["training_images"] == 8 and card["steps"] == 8
    assert (tmp_path / "straight" / "templates.json").is_file()

    # save/load round trip: the trained model in memory and the saved folder give identical pseudo-captions
    scorer = BRIDGEScore(model=model_dir, device="cpu", tagger=word_tagger(), tagger_name="test-unigram-tagger")
    trained = straight.accelerator.unwrap_model(straight.model).eval()
    loaded = scorer.bridge.model
    assert all(torch.equal(tensor, trained.state_dict()[name]) for name, tensor in loaded.state_dict().items())
    images = synthetic_images(3, seed=9)
    first = scorer.score(images, ["a dog", "a red car", "the grass"])
    fresh = BRIDGEScore(model=model_dir, device="cpu", tagger=word_tagger(), tagger_name="test-unigram-tagger")
    assert fresh.score(images, ["a dog", "a red car", "the grass"]) == first


TWO_PROCESS_SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[2])
from fixtures.bridge_models import word_tagger
from capeval.training.bridge import BridgeTrainer, TrainingConfig
config = TrainingConfig.from_dict(json.loads(open(sys.argv[1]).read()))
trainer = BridgeTrainer(config, tagger=word_tagger())
assert trainer.accelerator.num_processes == 2
trainer.train()
trainer.accelerator.end_training()
"""


def test_two_processes_follow_the_one_process_loss_curve(coco: dict, tmp_path: Path) -> None:
    config = training_config(coco, tmp_path / "two", epochs=2, batch_size=8, checkpoint_every=100)
    (tmp_path / "config.json").write_text(json.dumps(config.to_dict()))
    script = tmp_path / "train.py"
    script.write_text(TWO_PROCESS_SCRIPT)
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port",
               "29531", str(script), str(tmp_path / "config.json"), str(TESTS_DIR)]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=600,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert completed.returncode == 0, completed.stderr[-3000:]
    two = json.loads((tmp_path / "two" / "model" / "run_card.json").read_text())
    single = BridgeTrainer(training_config(coco, tmp_path / "one", epochs=2, batch_size=8, checkpoint_every=100),
                           tagger=word_tagger())
    single.train()
    assert two["processes"] == 2 and len(two["loss_history"]) == len(single.history) == 2
    for theirs, ours in zip(two["loss_history"], single.history):
        for name in ("loss", "l1", "l2", "l3"):
            assert theirs[name] == pytest.approx(ours[name], rel=1e-5)
    one_weights = load_file(str(tmp_path / "one" / "model" / "model.safetensors"))
    two_weights = load_file(str(tmp_path / "two" / "model" / "model.safetensors"))
    for name, tensor in one_weights.items():
        theirs = two_weights[name]
        if name.endswith("in_proj_bias"):  # the key bias cannot change attention: its gradient is rounding noise,
            width = tensor.shape[0] // 3   # which AdamW's normalisation turns into steps of any sign
            tensor, theirs = torch.cat([tensor[:width], tensor[2 * width:]]), torch.cat([theirs[:width],
                                                                                         theirs[2 * width:]])
        torch.testing.assert_close(theirs, tensor, rtol=1e-3, atol=1e-4)  # lr 1e-3; AdamW amplifies rounding


@pytest.mark.parametrize("overrides, message", [
    (dict(epochs=0), "^epochs must be a positive integer, got 0$"),
    (dict(learning_rate=float("nan")), "^learning_rate must be a positive finite number, got nan$"),
    (dict(learning_rate=0), "^learning_rate must be a positive finite number, got 0$"),
    (dict(weight_decay=-0.1), "^weight_decay must be a non-negative finite number, got -0.1$"),
    (dict(batch_size=2.5), "^batch_size must be a positive integer, got float 2.5$"),
    (dict(max_steps=0), "^max_steps must be a positive integer, got 0$"),
    (dict(schedule="linear"), "^schedule must be one of constant, cosine, got 'linear'$"),
])
def test_options_that_cannot_train_are_refused_before_anything_loads(overrides: dict, message: str) -> None:
    settings = dict(annotations="a.json", images="images", output_dir="out", num_workers=0, **overrides)
    with pytest.raises(InputError, match=message):
        TrainingConfig(**settings)


def test_unknown_fields_of_a_saved_run_are_refused() -> None:
    values = TrainingConfig(annotations="a.json", images="images", output_dir="out").to_dict()
    assert TrainingConfig.from_dict(values).to_dict() == values
    with pytest.raises(ConfigError, match=r"unknown TrainingConfig fields: \['epoch'\]"):
        TrainingConfig.from_dict({**values, "epoch": 3})
    with pytest.raises(ConfigError, match=r"unknown LossWeights fields: \['temp'\]"):
        TrainingConfig.from_dict({**values, "losses": {"temp": 0.1}})


@pytest.mark.parametrize("overrides, message", [
    (dict(num_heads=3), "num_heads 3 does not divide the backbone's text width 128"),
    (dict(num_layers=0), "num_layers must be a positive integer, got 0"),
    (dict(dropout=1.0), r"dropout must be in \[0, 1\), got 1.0"),
])
def test_a_mapping_network_that_cannot_be_built_is_refused(coco: dict, overrides: dict, message: str) -> None:
    from capeval.models.bridge.modeling import BridgeModel
    from capeval.models.clip.loading import load_backbone

    config = tiny_bridge_config(coco["clip"], coco["blip"], **overrides)
    with pytest.raises(ConfigError, match=f"^BRIDGE config: {message}$"):
        BridgeModel(config, load_backbone(config.backbone, device="cpu").model)

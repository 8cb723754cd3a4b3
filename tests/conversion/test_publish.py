"""Tests for conversion/publish.py: the dry-run plan, the checks that refuse a bad publish, the hub calls."""
from __future__ import annotations

import copy
import hashlib
import json
import shutil
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from huggingface_hub import CommitOperationAdd, CommitOperationDelete
from safetensors.torch import load_file, save_file

from capeval.hub import CHECKSUMS_NAME
from capeval.originals import SOURCES
from conversion.published_folders import folder_kind
from conversion.publish import ORIGINAL_SHA256_PATTERN, PublishError, main, plan_space, publish, read_front_matter
from fixtures.bridge_models import make_tiny_bridge, tiny_bridge_config
from fixtures.clip_checkpoints import TinyClip, save_pacs_checkpoint
from fixtures.model_cards import CARD_SOURCE, make_card_folder
from fixtures.paths import REPO_ROOT
from fixtures.polos_checkpoints import SEED, PolosOriginal, build_polos_original
from fixtures.tiger_checkpoints import convert_original, synthetic_state, vocab_words

METRIC_SPACES = [REPO_ROOT / "metrics" / "clipscore", REPO_ROOT / "metrics" / "pacscore"]
MARKER_OPEN, MARKER_CLOSE = "<!--original-sha256-->", "<!--/original-sha256-->"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any connection attempt fails the test: the dry run and every refusal must stay offline."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)


@pytest.fixture()
def tiny_card(tiny_openai_clip: TinyClip, tmp_path: Path) -> Path:
    return make_card_folder(tmp_path / "hub", tiny_openai_clip.hf_dir)


@pytest.fixture()
def space_dir(tmp_path: Path) -> Path:
    space = tmp_path / "metrics" / "clipscore"
    (space / "__pycache__").mkdir(parents=True)
    (space / "README.md").write_text("---\ntitle: CLIPScore\nsdk: gradio\napp_file: app.py\n---\n\n# CLIP-S\n")
    (space / "app.py").write_text("import evaluate\n")
    (space / "clipscore.py").write_text("# metric module\n")
    (space / "__pycache__" / "clipscore.cpython-311.pyc").write_bytes(b"\x00\x01")
    (space / ".ipynb_checkpoints").mkdir()
    (space / ".ipynb_checkpoints" / "app-checkpoint.py").write_text("old\n")
    return space


def test_dry_run_plan(tiny_openai_clip: TinyClip, tiny_card: Path, space_dir: Path,
                      capsys: pytest.CaptureFixture[str]) -> None:
    plans = main(["--dry-run", "--tag", "v1.0",
                  "--model", str(tiny_card), str(tiny_openai_clip.hf_dir), str(tiny_openai_clip.checkpoint),
                  "--space", str(space_dir)])
    printed = capsys.readouterr().out
    model_plan, space_plan = plans

    assert (model_plan.repo_id, model_plan.repo_type, model_plan.tag) == ("capeval/pacs-clip-vit-b-32", "model", "v1.0")
    original_sha256 = sha256_hex(tiny_openai_clip.checkpoint.read_bytes())
    assert model_plan.original_sha256 == original_sha256
    card_text = (tiny_card / "README.md").read_text(encoding="utf-8")
    before, rest = card_text.split(MARKER_OPEN)
    after = rest.split(MARKER_CLOSE)[1]
    expected_card = f"{before}{MARKER_OPEN}`{original_sha256}`{MARKER_CLOSE}{after}".encode("utf-8")
    expected_model_files = {"README.md": expected_card,
                            "model.safetensors": (tiny_openai_clip.hf_dir / "model.safetensors").read_bytes()}
    for path in tiny_card.iterdir():
        if path.name != "README.md":
            expected_model_files[path.name] = path.read_bytes()
    assert {"config.json", "preprocessor_config.json", "vocab.json", "merges.txt", "tokenizer_config.json",
            "special_tokens_map.json"} <= set(expected_model_files)

    assert (space_plan.repo_id, space_plan.repo_type, space_plan.space_sdk) == ("capeval/clipscore", "space", "gradio")
    expected_space_files = {name: (space_dir / name).read_bytes() for name in ("README.md", "app.py", "clipscore.py")}

    for plan, expected_files in ((model_plan, expected_model_files), (space_plan, expected_space_files)):
        assert sorted(planned.path_in_repo for planned in plan.files) == sorted(expected_files)
        for planned in plan.files:
            content = expected_files[planned.path_in_repo]
            assert (planned.size, planned.sha256) == (len(content), sha256_hex(content)), planned.path_in_repo
            assert f"  {planned.path_in_repo}\t{len(content)}\t{sha256_hex(content)}\t" in printed
    assert "model capeval/pacs-clip-vit-b-32, tag v1.0" in printed
    assert "space capeval/clipscore (sdk gradio), tag v1.0" in printed
    assert f"original checkpoint sha256: {original_sha256}" in printed


def test_dry_run_without_original_reports_it_unknown(tiny_openai_clip: TinyClip, tiny_card: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    (plan,) = main(["--dry-run", "--model", str(tiny_card), str(tiny_openai_clip.hf_dir)])
    assert plan.original_sha256 is None
    readme = next(planned for planned in plan.files if planned.path_in_repo == "README.md")
    assert readme.content == (tiny_card / "README.md").read_bytes()
    assert "original checkpoint sha256: UNKNOWN" in capsys.readouterr().out


def test_publish_refuses_without_original(tiny_openai_clip: TinyClip, tiny_card: Path) -> None:
    with pytest.raises(PublishError, match="capeval/pacs-clip-vit-b-32: refusing to publish without the original"):
        main(["--model", str(tiny_card), str(tiny_openai_clip.hf_dir)])


def test_full_size_card_refuses_tiny_weights(tiny_openai_clip: TinyClip) -> None:
    with pytest.raises(PublishError, match=r"config\.json differs at .*vision_config\.hidden_size"):
        main(["--dry-run", "--model", str(CARD_SOURCE), str(tiny_openai_clip.hf_dir)])


def test_weights_from_another_checkpoint_are_refused(tiny_openai_clip: TinyClip, tiny_card: Path,
                                                     tmp_path: Path) -> None:
    other_model = copy.deepcopy(tiny_openai_clip.model)
    with torch.no_grad():
        other_model.ln_final.bias[0] += 1e-3
    other = save_pacs_checkpoint(other_model, tmp_path / "other.pth")
    with pytest.raises(PublishError, match=r"1 tensors differ, e\.g\. text_model\.final_layer_norm\.bias"):
        main(["--dry-run", "--model", str(tiny_card), str(tiny_openai_clip.hf_dir), str(other)])
    incomplete = tmp_path / "incomplete.pth"
    state_dict = tiny_openai_clip.model.state_dict()
    torch.save({"state_dict": {key: value for key, value in state_dict.items() if key != "logit_scale"}}, incomplete)
    with pytest.raises(PublishError, match="missing keys.*'logit_scale'"):
        main(["--dry-run", "--model", str(tiny_card), str(tiny_openai_clip.hf_dir), str(incomplete)])


def test_weights_missing_a_tensor_are_refused(tiny_openai_clip: TinyClip, tiny_card: Path, tmp_path: Path) -> None:
    weights_dir = tmp_path / "converted"
    shutil.copytree(tiny_openai_clip.hf_dir, weights_dir)
    (weights_dir / CHECKSUMS_NAME).unlink()  # weights written by other code than capeval's converters
    tensors = load_file(weights_dir / "model.safetensors")
    del tensors["logit_scale"]
    save_file(tensors, weights_dir / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(PublishError, match="missing: logit_scale"):
        main(["--dry-run", "--model", str(tiny_card), str(weights_dir)])


def test_damaged_weights_are_refused(tiny_openai_clip: TinyClip, tiny_card: Path, tmp_path: Path) -> None:
    weights_dir = tmp_path / "converted"
    shutil.copytree(tiny_openai_clip.hf_dir, weights_dir)
    data = bytearray((weights_dir / "model.safetensors").read_bytes())
    data[-10] ^= 0xFF
    (weights_dir / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(PublishError, match=r"capeval/pacs-clip-vit-b-32: .*model\.safetensors has sha256 .* its bytes "
                                           "are damaged or were changed; convert the original checkpoint again"):
        main(["--dry-run", "--model", str(tiny_card), str(weights_dir)])


def test_card_folder_must_hold_the_converted_files(tiny_openai_clip: TinyClip, tiny_card: Path) -> None:
    (tiny_card / "tokenizer.json").unlink()
    with pytest.raises(PublishError, match="regenerate the card folder"):
        main(["--dry-run", "--model", str(tiny_card), str(tiny_openai_clip.hf_dir)])


def test_space_checks(space_dir: Path) -> None:
    (space_dir / "weights.pt").write_bytes(b"0")
    with pytest.raises(PublishError, match="weights.pt is a weights file"):
        plan_space(space_dir, "capeval", None)
    (space_dir / "weights.pt").unlink()
    (space_dir / "README.md").write_text("---\ntitle: CLIPScore\nsdk: docker\n---\n")
    with pytest.raises(PublishError, match="sdk 'docker', expected 'gradio'"):
        plan_space(space_dir, "capeval", None)


@pytest.mark.parametrize("space", METRIC_SPACES, ids=lambda path: path.name)
def test_metric_space_folders_are_publishable(space: Path) -> None:
    if not space.is_dir():
        pytest.skip(f"{space} not written yet")
    plan = plan_space(space, "capeval", None)
    assert read_front_matter(space / "README.md")["sdk"] == "gradio"
    assert "README.md" in {planned.path_in_repo for planned in plan.files}


@dataclass
class RecordingApi:
    """Stands in for ``huggingface_hub.HfApi``: records calls, holds one stale file per repo."""

    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def create_repo(self, repo_id: str, **kwargs: Any) -> None:
        self.calls.append(("create_repo", {"repo_id": repo_id, **kwargs}))

    def list_repo_files(self, repo_id: str, **kwargs: Any) -> list[str]:
        return [".gitattributes", "README.md", "pytorch_model.bin"]

    def create_commit(self, repo_id: str, operations: list[Any], **kwargs: Any) -> Any:
        self.calls.append(("create_commit", {"repo_id": repo_id, "operations": operations, **kwargs}))
        return type("CommitInfo", (), {"oid": f"commit-of-{repo_id}"})()

    def create_tag(self, repo_id: str, **kwargs: Any) -> None:
        self.calls.append(("create_tag", {"repo_id": repo_id, **kwargs}))


def test_publish_creates_commits_and_tags(tiny_openai_clip: TinyClip, tiny_card: Path, space_dir: Path) -> None:
    plans = main(["--dry-run", "--tag", "v1.0",
                  "--model", str(tiny_card), str(tiny_openai_clip.hf_dir), str(tiny_openai_clip.checkpoint),
                  "--space", str(space_dir)])
    api = RecordingApi()
    assert publish(plans, api, "publish") == ["commit-of-capeval/pacs-clip-vit-b-32", "commit-of-capeval/clipscore"]
    names = [name for name, _ in api.calls]
    assert names == ["create_repo", "create_commit", "create_tag"] * 2
    model_repo, model_commit, model_tag, space_repo, space_commit, _ = (arguments for _, arguments in api.calls)
    assert (model_repo["repo_type"], model_repo["space_sdk"], model_repo["exist_ok"]) == ("model", None, True)
    assert (space_repo["repo_type"], space_repo["space_sdk"]) == ("space", "gradio")
    for commit, plan in ((model_commit, plans[0]), (space_commit, plans[1])):
        added = {operation.path_in_repo for operation in commit["operations"]
                 if isinstance(operation, CommitOperationAdd)}
        deleted = [operation.path_in_repo for operation in commit["operations"]
                   if isinstance(operation, CommitOperationDelete)]
        assert added == {planned.path_in_repo for planned in plan.files}
        assert deleted == ["pytorch_model.bin"]
    assert (model_tag["tag"], model_tag["revision"], model_tag["repo_type"]) == (
        "v1.0", "commit-of-capeval/pacs-clip-vit-b-32", "model")


def test_publish_refuses_plan_without_original_before_any_call(tiny_openai_clip: TinyClip, tiny_card: Path) -> None:
    plans = main(["--dry-run", "--model", str(tiny_card), str(tiny_openai_clip.hf_dir)])
    api = RecordingApi()
    with pytest.raises(PublishError, match="refusing to publish"):
        publish(plans, api, "publish")
    assert api.calls == []


# Models other than CLIP: Polos (weights in three files, two subfolders), SCAN (two original files), BRIDGE (no
# original files), and the models capeval does not publish.

POLOS = "capeval/polos-clip-vit-b-32"
TIGER = "capeval/tiger-scan-coco"
BRIDGE = "capeval/bridge-clip-vit-b-32"
POLOS_COPIES = ("encoder/vocab.json", "encoder/merges.txt")
"""The Polos files uploaded from the converted folder (copies of the SimCSE originals)."""


def polos_originals(original: PolosOriginal) -> list[str]:
    """The original files in the card's order: the checkpoint and the sentence encoder's files."""
    encoder = original.encoder_dir
    return [str(path) for path in (original.archive, encoder / "config.json", encoder / "vocab.json",
                                   encoder / "merges.txt")]


def convert_polos(original: PolosOriginal, out: Path) -> Path:
    from conversion.polos_converter import convert

    encoder = original.encoder_dir
    return convert(original.archive, encoder / "config.json", encoder / "vocab.json", encoder / "merges.txt", out)


@pytest.fixture(scope="module")
def polos_original(tmp_path_factory: pytest.TempPathFactory) -> PolosOriginal:
    return build_polos_original(tmp_path_factory.mktemp("polos-original"))


@pytest.fixture()
def polos_converted(polos_original: PolosOriginal, tmp_path: Path) -> Path:
    return convert_polos(polos_original, tmp_path / "polos-converted")


@pytest.fixture()
def polos_card(polos_converted: Path, tmp_path: Path) -> Path:
    return make_card_folder(tmp_path / "hub", polos_converted, POLOS, left_out=POLOS_COPIES)


def test_polos_dry_run_plans_every_file_of_its_subfolders(polos_original: PolosOriginal, polos_converted: Path,
                                                          polos_card: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    (plan,) = main(["--dry-run", "--model", str(polos_card), str(polos_converted), *polos_originals(polos_original)])
    printed = capsys.readouterr().out
    clip_files = {f"clip/{name}" for name in ("config.json", "merges.txt", "preprocessor_config.json",
                                              "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json",
                                              "vocab.json", "model.safetensors")}
    expected = {"README.md", "config.json", "model.safetensors", "encoder/config.json", "encoder/tokenizer_config.json",
                "encoder/vocab.json", "encoder/merges.txt", "encoder/model.safetensors", *clip_files}
    assert sorted(planned.path_in_repo for planned in plan.files) == sorted(expected)
    checkpoint_sha256 = sha256_hex(polos_original.archive.read_bytes())
    assert plan.original_sha256 == checkpoint_sha256
    assert [name for name, _ in plan.originals] == ["reprod.zip", "config.json", "vocab.json", "merges.txt"]
    for planned in plan.files:
        if planned.path_in_repo == "README.md":
            assert f"<!--original-sha256-->`{checkpoint_sha256}`<!--/original-sha256-->" in planned.content.decode()
            continue
        source = polos_card if (polos_card / planned.path_in_repo).is_file() else polos_converted
        content = (source / planned.path_in_repo).read_bytes()
        assert planned.source == source / planned.path_in_repo
        assert (planned.size, planned.sha256) == (len(content), sha256_hex(content)), planned.path_in_repo
        assert f"  {planned.path_in_repo}\t{len(content)}\t{sha256_hex(content)}\t" in printed
    vocab_sha256 = sha256_hex((polos_original.encoder_dir / "vocab.json").read_bytes())
    assert f"original checkpoint sha256: {checkpoint_sha256}" in printed
    assert f"original vocab.json sha256: {vocab_sha256}" in printed


def test_polos_tampered_subfolder_config_is_refused(polos_converted: Path, polos_card: Path) -> None:
    config_path = polos_card / "encoder" / "config.json"
    config = json.loads(config_path.read_text())
    config["_name_or_path"] = "another/checkpoint"  # not part of the architecture: the card's copy is a stand-in
    config_path.write_text(json.dumps(config))
    main(["--dry-run", "--model", str(polos_card), str(polos_converted)])
    config["num_hidden_layers"] += 1
    config_path.write_text(json.dumps(config))
    with pytest.raises(PublishError, match=r"polos-converted/encoder/config\.json differs at num_hidden_layers"):
        main(["--dry-run", "--model", str(polos_card), str(polos_converted)])

    clip_config_path = polos_card / "clip" / "config.json"
    clip_config = json.loads(clip_config_path.read_text())
    clip_config["projection_dim"] = 256
    clip_config_path.write_text(json.dumps(clip_config))
    config["num_hidden_layers"] -= 1
    config_path.write_text(json.dumps(config))
    with pytest.raises(PublishError, match=r"polos-converted/clip/config\.json differs at projection_dim"):
        main(["--dry-run", "--model", str(polos_card), str(polos_converted)])


def test_polos_card_folder_must_hold_the_subfolders_files(polos_converted: Path, polos_card: Path) -> None:
    (polos_card / "clip" / "tokenizer.json").unlink()
    with pytest.raises(PublishError, match=r"only in the converted folder: \['clip/tokenizer\.json'\]"):
        main(["--dry-run", "--model", str(polos_card), str(polos_converted)])
    (polos_converted / "clip" / "tokenizer.json").unlink()
    (polos_converted / "encoder" / "merges.txt").unlink()
    with pytest.raises(PublishError, match=r"encoder/merges\.txt missing: the Polos files uploaded from the converted"):
        main(["--dry-run", "--model", str(polos_card), str(polos_converted)])


def test_polos_damaged_or_misfit_weights_are_refused(polos_converted: Path, polos_card: Path) -> None:
    encoder_weights = polos_converted / "encoder" / "model.safetensors"
    intact = encoder_weights.read_bytes()
    data = bytearray(intact)
    data[-10] ^= 0xFF
    encoder_weights.write_bytes(bytes(data))
    with pytest.raises(PublishError, match=r"capeval/polos-clip-vit-b-32: .*encoder/model\.safetensors has sha256 .* "
                                           "damaged or were changed; convert the original checkpoint again"):
        main(["--dry-run", "--model", str(polos_card), str(polos_converted)])
    encoder_weights.write_bytes(intact)

    head = polos_converted / "model.safetensors"
    (polos_converted / CHECKSUMS_NAME).unlink()  # weights written by other code than capeval's converters
    tensors = load_file(head)
    del tensors["ff.0.ff.linear_3.bias"]
    tensors["ff.0.ff.linear_2.weight"] = tensors["ff.0.ff.linear_2.weight"][:, :-1].contiguous()
    save_file(tensors, head, metadata={"format": "pt"})
    with pytest.raises(PublishError, match=r"polos-converted/model\.safetensors does not fit .*/config\.json: "
                                           r"missing: ff\.0\.ff\.linear_3\.bias; wrong shape: ff\.0\.ff\.linear_2\.weight"):
        main(["--dry-run", "--model", str(polos_card), str(polos_converted)])


def test_polos_original_that_does_not_match_is_refused(polos_original: PolosOriginal, polos_converted: Path,
                                                       polos_card: Path, tmp_path: Path) -> None:
    other = build_polos_original(tmp_path / "other", seed=SEED + 1)
    with pytest.raises(PublishError, match=r"polos-converted/model\.safetensors was not converted from original files "
                                           r".*reprod\.zip.*: \d+ tensors differ, e\.g\. ff\.0\.ff\.linear_1\.bias"):
        main(["--dry-run", "--model", str(polos_card), str(polos_converted), *polos_originals(other)])
    originals = polos_originals(polos_original)
    with pytest.raises(PublishError, match=r"give its original files in this order: reprod\.zip \(checkpoint\), "
                                           r".*\(missing: config\.json, vocab\.json, merges\.txt\)"):
        main(["--dry-run", "--model", str(polos_card), str(polos_converted), originals[0]])
    other_vocab = tmp_path / "vocab.json"
    other_vocab.write_text(json.dumps({**json.loads(Path(originals[2]).read_text()), "extra": 999}))
    with pytest.raises(PublishError, match=r"polos-converted/encoder/vocab\.json differs at extra: .*is not what "
                                           "converting original files"):
        main(["--dry-run", "--model", str(polos_card), str(polos_converted), *originals[:2], str(other_vocab),
              originals[3]])


@dataclass(frozen=True)
class TinyScan:
    converted: Path
    checkpoint: Path
    vocab: Path
    card: Path


def make_tiny_scan(folder: Path, seed: int) -> tuple[Path, Path, Path]:
    """A tiny original SCAN checkpoint and vocabulary in ``folder``, converted by conversion/convert_scan.py: the
    converted folder, the checkpoint and the vocabulary."""
    words = vocab_words(["a", "dog", "runs"], 12)
    image_state, text_state = synthetic_state(len(words), word_dim=8, embed_size=6, img_dim=10, seed=seed)
    folder.mkdir(parents=True)
    converted = convert_original(folder, image_state, text_state, words)
    return converted, folder / "model_best.pth", folder / "vocab_orig.json"


@pytest.fixture()
def tiny_scan(tmp_path: Path) -> TinyScan:
    converted, checkpoint, vocab = make_tiny_scan(tmp_path / "scan", seed=5)
    return TinyScan(converted, checkpoint, vocab, make_card_folder(tmp_path / "hub", converted, TIGER))


def test_scan_dry_run_plan(tiny_scan: TinyScan) -> None:
    (plan,) = main(["--dry-run", "--model", str(tiny_scan.card), str(tiny_scan.converted), str(tiny_scan.checkpoint),
                    str(tiny_scan.vocab)])
    assert sorted(planned.path_in_repo for planned in plan.files) == [
        "README.md", "config.json", "model.safetensors", "vocab.json"]
    assert plan.original_sha256 == sha256_hex(tiny_scan.checkpoint.read_bytes())
    weights = next(planned for planned in plan.files if planned.path_in_repo == "model.safetensors")
    assert weights.sha256 == sha256_hex((tiny_scan.converted / "model.safetensors").read_bytes())


def test_scan_checks(tiny_scan: TinyScan, tmp_path: Path) -> None:
    other, other_checkpoint, _ = make_tiny_scan(tmp_path / "other", seed=6)
    with pytest.raises(PublishError, match=r"converted/model\.safetensors was not converted from original files "
                                           r".*model_best\.pth.*: 11 tensors differ, e\.g\. img_enc\.fc\.bias"):
        main(["--dry-run", "--model", str(tiny_scan.card), str(tiny_scan.converted), str(other_checkpoint),
              str(tiny_scan.vocab)])
    config_path = tiny_scan.card / "config.json"
    intact_config = config_path.read_text()
    config_path.write_text(json.dumps({**json.loads(intact_config), "lambda_softmax": 4.0}))
    with pytest.raises(PublishError, match=r"converted/config\.json differs at lambda_softmax"):
        main(["--dry-run", "--model", str(tiny_scan.card), str(tiny_scan.converted)])
    config_path.write_text(intact_config)
    shutil.copyfile(other / "model.safetensors", tiny_scan.converted / "model.safetensors")  # checksums not updated
    with pytest.raises(PublishError, match=r"tiger-scan-coco: .*converted/model\.safetensors has sha256 .* damaged"):
        main(["--dry-run", "--model", str(tiny_scan.card), str(tiny_scan.converted)])


def test_bridge_is_published_without_originals(tiny_openai_clip: TinyClip, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    trained = make_tiny_bridge(tmp_path / "trained", tiny_bridge_config(tiny_openai_clip.hf_dir, tmp_path / "blip"))
    (trained / "run_card.json").write_text(json.dumps({"seed": 0}))
    card = make_card_folder(tmp_path / "hub", trained, BRIDGE, left_out=("config.json", "run_card.json"))
    (plan,) = main(["--dry-run", "--model", str(card), str(trained)])
    assert sorted(planned.path_in_repo for planned in plan.files) == [
        "README.md", "config.json", "model.safetensors", "run_card.json"]
    assert "no original files (a model of capeval's own)" in capsys.readouterr().out
    api = RecordingApi()
    assert publish([plan], api, "publish") == [f"commit-of-{BRIDGE}"]
    with pytest.raises(PublishError, match="has no original files"):
        main(["--dry-run", "--model", str(card), str(trained), str(tiny_openai_clip.checkpoint)])
    config = json.loads((trained / "config.json").read_text())
    (trained / "config.json").write_text(json.dumps({**config, "num_layers": config["num_layers"] + 1}))
    with pytest.raises(PublishError, match=r"trained/model\.safetensors does not fit .*trained/config\.json: "
                                           r"missing: mapper\.layers\.2\."):
        main(["--dry-run", "--model", str(card), str(trained)])


@pytest.mark.parametrize("repo_id", ["Salesforce/blip-image-captioning-large", "capeval/no-such-model"])
def test_models_capeval_does_not_publish_are_refused(repo_id: str, tmp_path: Path) -> None:
    card = tmp_path / repo_id
    card.mkdir(parents=True)
    with pytest.raises(PublishError, match=f"{repo_id}: capeval publishes no such model"):
        main(["--dry-run", "--model", str(card), str(tmp_path)])


@pytest.mark.parametrize("card", sorted(path for path in (REPO_ROOT / "hub_models").glob("*/*") if path.is_dir()),
                         ids=lambda path: path.name)
def test_every_card_folder_is_of_a_published_kind(card: Path) -> None:
    repo_id = f"{card.parent.name}/{card.name}"
    assert folder_kind(repo_id) is not None
    marker_count = len(ORIGINAL_SHA256_PATTERN.findall((card / "README.md").read_text(encoding="utf-8")))
    assert marker_count == (1 if SOURCES[repo_id].files else 0)


FULL_SIZE_TENSORS = {
    "capeval/tiger-scan-coco": ("model.safetensors", "txt_enc.embed.weight", (11353, 300)),
    "capeval/vilbert-multi-task": ("model.safetensors", "embeddings.word_embeddings.weight", (30522, 768)),
    "capeval/bottom-up-frcnn-r101-vg": ("model.safetensors", "backbone.stem.conv.weight", (64, 3, 7, 7)),
    "capeval/vilbert-detector-x152-fpn": ("model.safetensors", "backbone.stem.conv.weight", (64, 3, 7, 7)),
    "capeval/polos-clip-vit-b-32": ("model.safetensors", "ff.0.ff.linear_1.weight", (2304, 4 * 768 + 6 * 512)),
    "capeval/pacs-clip-vit-b-32": ("model.safetensors", "visual_projection.weight", (512, 768)),
}
"""One tensor of each kind of full-size model, as its card folder's configs give it."""


@pytest.mark.parametrize("repo_id", sorted(FULL_SIZE_TENSORS))
def test_full_size_tensors_from_the_committed_configs(repo_id: str) -> None:
    kind = folder_kind(repo_id)
    shapes = kind.shapes(REPO_ROOT / "hub_models" / repo_id)  # built on the meta device: nothing allocated
    assert sorted(shapes) == sorted(kind.weights)
    weights_file, tensor, shape = FULL_SIZE_TENSORS[repo_id]
    assert shapes[weights_file][tensor] == shape

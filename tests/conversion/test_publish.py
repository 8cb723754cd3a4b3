"""Tests for conversion/publish.py: the dry-run plan, the checks that refuse a bad publish, the hub calls."""
from __future__ import annotations

import copy
import hashlib
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
from conversion.publish import PublishError, main, plan_space, publish, read_front_matter
from fixtures.clip_checkpoints import TinyClip, save_pacs_checkpoint
from fixtures.model_cards import CARD_SOURCE, make_card_folder
from fixtures.paths import REPO_ROOT

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

"""The conversion of the authors' checkpoint: every weight traced to its checkpoint key, the layouts it reads, and
the refusals (unsafe pickles, settings the wheel cannot run)."""
from __future__ import annotations

import builtins
import shutil
import zipfile
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from capeval.models.polos.configuration import PolosConfig
from conversion.clip_converter import convert_state_dict, clip_config_from_state_dict
from conversion.polos_converter import CheckpointError, convert, read_state_dict
from fixtures.polos_checkpoints import HPARAMS, PolosOriginal, save_lightning_checkpoint


def test_every_weight_traces_to_its_checkpoint_key(polos_original: PolosOriginal, polos_dir: Path) -> None:
    original = polos_original.state_dict
    head = load_file(str(polos_dir / "model.safetensors"))
    for name, tensor in head.items():
        assert torch.equal(tensor, original[name])
    encoder = load_file(str(polos_dir / "encoder" / "model.safetensors"))
    for name, tensor in encoder.items():
        assert torch.equal(tensor, original[f"encoder.model.{name}"])
    clip_original = {key[len("clip."):]: value for key, value in original.items() if key.startswith("clip.")}
    expected = convert_state_dict(clip_original, clip_config_from_state_dict(clip_original, "openai"))
    clip = load_file(str(polos_dir / "clip" / "model.safetensors"))
    assert set(clip) == set(expected)
    assert all(torch.equal(clip[name], expected[name].float()) for name in clip)
    used = {*head, *(f"encoder.model.{name}" for name in encoder), *(f"clip.{key}" for key in clip_original)}
    assert set(original) - used == {"scalar_mix.dropout_mask", "scalar_mix.dropout_fill"}


def test_config_states_the_hparams(polos_dir: Path, polos_original: PolosOriginal) -> None:
    config = PolosConfig.load(polos_dir)
    assert (config.layer, config.pool, config.hidden_sizes, config.activations, config.final_activation) == (
        "mix", "cls", (48, 24), "Tanh", None)
    assert config.pretrained_model == str(polos_original.encoder_dir)


@pytest.mark.parametrize("layout", ["folder", "lightning", "ckpt"])
def test_reads_the_extracted_layouts(layout: str, polos_original: PolosOriginal, polos_dir: Path,
                                     tmp_path: Path) -> None:
    """The extracted ``reprod`` folder, Lightning's ``version/hparams.yaml`` + ``checkpoints/x.ckpt``, or the
    ``.ckpt`` itself give the same folder as the zip."""
    run = tmp_path / "run"
    if layout == "lightning":
        (run / "checkpoints").mkdir(parents=True)
        shutil.copy(polos_original.checkpoint, run / "checkpoints" / "epoch=3.ckpt")
    else:
        run.mkdir()
        shutil.copy(polos_original.checkpoint, run / "reprod.ckpt")
    shutil.copy(polos_original.hparams, run / "hparams.yaml")
    source = {"folder": run, "lightning": run, "ckpt": run / "reprod.ckpt"}[layout]
    encoder = polos_original.encoder_dir
    out = convert(source, encoder / "config.json", encoder / "vocab.json", encoder / "merges.txt", tmp_path / "out")
    for name in ("model.safetensors", "encoder/model.safetensors", "clip/model.safetensors", "config.json"):
        assert (out / name).read_bytes() == (polos_dir / name).read_bytes()


class _Payload:
    def __reduce__(self) -> tuple:
        return builtins.exec, ("open(__import__('os').environ['POLOS_MARKER'], 'w').close()",)


def test_a_malicious_checkpoint_is_refused_unexecuted(polos_original: PolosOriginal, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "executed"
    monkeypatch.setenv("POLOS_MARKER", str(marker))
    path = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {"ff.0.ff.linear_1.bias": torch.zeros(1)}, "callbacks": {"x": _Payload()}}, path)
    with pytest.raises(CheckpointError, match="refused to load the global __builtin__.exec"):
        read_state_dict(path)
    assert not marker.exists()


def test_lightning_metadata_is_read_as_inert_data(polos_original: PolosOriginal) -> None:
    state = read_state_dict(polos_original.checkpoint)
    assert set(state) == set(polos_original.state_dict)


@pytest.mark.parametrize("change, message", [
    ({"pool": "max"}, "pool 'max'"), ({"encoder_model": "XLMR"}, "fairseq XLM-R"),
    ({"model": "PolosRanker"}, "PolosEstimator"), ({"activations": "Swish"}, "activation 'Swish'")])
def test_settings_capeval_cannot_run_are_refused(change: dict, message: str, polos_original: PolosOriginal,
                                                 tmp_path: Path) -> None:
    run = tmp_path / "reprod"
    run.mkdir()
    shutil.copy(polos_original.checkpoint, run / "reprod.ckpt")
    (run / "hparams.yaml").write_text(yaml.safe_dump({**HPARAMS, "pretrained_model": "x", **change}))
    encoder = polos_original.encoder_dir
    with pytest.raises(CheckpointError, match=message):
        convert(run, encoder / "config.json", encoder / "vocab.json", encoder / "merges.txt", tmp_path / "out")


def test_zip_members_outside_the_folder_are_refused(polos_original: PolosOriginal, tmp_path: Path) -> None:
    archive = tmp_path / "reprod.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.write(polos_original.checkpoint, "../reprod.ckpt")
    encoder = polos_original.encoder_dir
    with pytest.raises(CheckpointError, match="member path"):
        convert(archive, encoder / "config.json", encoder / "vocab.json", encoder / "merges.txt", tmp_path / "out")


def test_a_checkpoint_without_the_wheels_keys_is_refused(polos_original: PolosOriginal, tmp_path: Path) -> None:
    run = tmp_path / "reprod"
    run.mkdir()
    state = dict(polos_original.state_dict, **{"extra.weight": torch.zeros(1)})
    save_lightning_checkpoint(state, HPARAMS, run / "reprod.ckpt")
    shutil.copy(polos_original.hparams, run / "hparams.yaml")
    encoder = polos_original.encoder_dir
    with pytest.raises(CheckpointError, match="unexpected keys \\['extra.weight'\\]"):
        convert(run, encoder / "config.json", encoder / "vocab.json", encoder / "merges.txt", tmp_path / "out")


@pytest.mark.parametrize("part", [".", "encoder", "clip"])
def test_each_weights_file_records_its_checksum_and_damage_is_refused(polos_dir: Path, part: str, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from capeval.hub import CHECKSUMS_NAME, DamagedWeightsError, LoadedModels
    from capeval.models.clip import loading as clip_loading
    from capeval.models.polos.configuration import CLIP_FOLDER, ENCODER_FOLDER
    from capeval.models.polos.loading import load_polos_folder

    assert {ENCODER_FOLDER, CLIP_FOLDER} == {"encoder", "clip"}
    folder = tmp_path / "model"
    shutil.copytree(polos_dir, folder)
    weights = folder / part / "model.safetensors"
    assert (folder / part / CHECKSUMS_NAME).is_file()
    data = bytearray(weights.read_bytes())
    data[-100] ^= 0xFF
    weights.write_bytes(bytes(data))
    monkeypatch.setattr(clip_loading, "_LOADED", LoadedModels())  # the CLIP tower is read from here, not reused
    with pytest.raises(DamagedWeightsError, match=f"{weights} has sha256 "):
        load_polos_folder(folder, torch.device("cpu"), "fp32")


def test_the_hub_folder_generator_writes_what_conversion_writes(polos_original: PolosOriginal, polos_dir: Path,
                                                                tmp_path: Path) -> None:
    """``hub_models/generate_configs.py`` writes, for the CLIP of an original, the converted folder's ``clip/`` files
    and encoder tokenizer config byte for byte, and a config wherever the conversion writes one; the weights and the
    encoder's vocabulary are the only other files of a converted folder."""
    from hub_models.generate_configs import write_polos_metadata

    clip_original = {key[len("clip."):]: value for key, value in polos_original.state_dict.items()
                     if key.startswith("clip.")}
    write_polos_metadata(clip_original, "openai", tmp_path)
    generated = sorted(path.relative_to(tmp_path).as_posix() for path in tmp_path.rglob("*") if path.is_file())
    originals = {"model.safetensors", "capeval_checksums.json", "vocab.json", "merges.txt"}
    converted = sorted(path.relative_to(polos_dir).as_posix() for path in polos_dir.rglob("*")
                       if path.is_file() and (path.parent.name != "encoder" or path.name not in originals)
                       and path.name not in ("model.safetensors", "capeval_checksums.json"))
    assert generated == converted
    sized = {"config.json", "encoder/config.json"}  # the tiny sizes here; the hub folder's: test_polos_scorer.py
    for name in sorted(set(generated) - sized):
        assert (tmp_path / name).read_bytes() == (polos_dir / name).read_bytes(), name

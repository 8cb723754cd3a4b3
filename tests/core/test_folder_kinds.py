"""A model folder of the wrong kind (a Polos folder given to CLIP-S, a CLIP folder to TIGEr, a RoBERTa folder to
EMScore, original checkpoints, an empty folder...) is refused before anything loads, in one line naming the folder,
what it holds and what is needed, with no traceback and nothing of transformers' load report."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable, Dict

import pytest
import torch

from capeval.cli import main
from capeval.folder_kinds import WrongModelFolderError
from fixtures.paths import REPO_ROOT

EXAMPLES = REPO_ROOT / "examples" / "clipscore"


def write_folder(folder: Path, config: Dict[str, object], *files: str) -> Path:
    """A folder with this ``config.json`` and empty files (the kind check reads names and the config alone)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    for name in ("model.safetensors", *files):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"")
    return folder


CLIP_CONFIG = {"model_type": "clip", "architectures": ["CLIPModel"]}
ROBERTA_CONFIG = {"model_type": "roberta", "architectures": ["RobertaModel"]}


def clip_folder(folder: Path) -> Path:
    return write_folder(folder, CLIP_CONFIG, "preprocessor_config.json", "vocab.json", "merges.txt")


def polos_folder(folder: Path) -> Path:
    write_folder(folder, {"model_type": "polos", "layer": "mix"})
    write_folder(folder / "encoder", ROBERTA_CONFIG, "vocab.json", "merges.txt")
    clip_folder(folder / "clip")
    return folder


def folder_of(*names: str) -> Callable[[Path], Path]:
    """A maker of a folder holding these empty files and no config.json."""
    def make(folder: Path) -> Path:
        folder.mkdir()
        for name in names:
            (folder / name).write_bytes(b"")
        return folder

    return make


FOLDERS: Dict[str, Callable[[Path], Path]] = {
    "polos": polos_folder,
    "clip": clip_folder,
    "roberta": lambda folder: write_folder(folder, ROBERTA_CONFIG, "vocab.json", "merges.txt"),
    "scan": lambda folder: write_folder(folder, {"model_type": "scan", "vocab_size": 10}, "vocab.json"),
    "vilbert": lambda folder: write_folder(folder, {"v_biattention_id": [0], "t_biattention_id": [1]}, "vocab.txt"),
    "bridge": lambda folder: write_folder(folder, {"backbone": "openai/clip-vit-base-patch32", "templates": {}}),
    "bottom-up": lambda folder: write_folder(folder, {"model_type": "bottom-up-frcnn"}),
    "empty": folder_of(),
    "tiger originals": folder_of("model_best.pth"),
    "no config": folder_of("notes.txt"),
}
HOLDS = {
    "polos": "holds a converted Polos model,",
    "clip": "holds a converted CLIP model,",
    "roberta": "holds a transformers 'roberta' model (RobertaModel),",
    "scan": "holds a converted SCAN model (TIGEr's),",
    "vilbert": "holds a converted ViLBERT model,",
    "bridge": "holds a BRIDGE model,",
    "bottom-up": "holds a converted bottom-up Faster R-CNN region detector (TIGEr's),",
    "empty": "holds nothing (an empty folder),",
    "tiger originals": "holds the original files of capeval/tiger-scan-coco (model_best.pth; `capeval download "
                       "capeval/tiger-scan-coco --original <each of its original files>` converts them),",
    "no config": "holds no config.json, only notes.txt,",
}


def load_with(loader: str, folder: Path) -> object:
    """What takes a folder of each kind: every family's ``model=``, and the detectors and BRIDGE's captioner."""
    from capeval import CLIPScore, EMScore, PACScore
    from capeval.scorers.bridge import BRIDGEScore
    from capeval.scorers.polos import Polos
    from capeval.scorers.tigerscore import TIGErScore
    from capeval.scorers.vilbertscore import ViLBERTScore

    if loader.startswith("detector:"):
        from capeval.models.regions.detectors import DETECTORS

        return DETECTORS[loader[len("detector:"):]].load(folder, parameter="regions")
    if loader == "captioner":
        from capeval.models.bridge.configuration import TemplateConfig
        from capeval.models.bridge.templates import BlipCaptioner

        return BlipCaptioner.load(TemplateConfig(captioner=str(folder)), torch.device("cpu"))
    scorers = {"clipscore": CLIPScore, "pacscore": PACScore, "emscore": EMScore, "tigerscore": TIGErScore,
               "vilbertscore": ViLBERTScore, "bridge": BRIDGEScore, "polos": Polos}
    return scorers[loader](model=folder, device="cpu")


NEEDS = {
    "clipscore": "a converted CLIP model", "pacscore": "a converted CLIP model", "emscore": "a converted CLIP model",
    "tigerscore": "a converted SCAN model (TIGEr's)", "vilbertscore": "a converted ViLBERT model",
    "bridge": "a BRIDGE model", "polos": "a converted Polos model",
    "detector:bottom-up": "a converted bottom-up Faster R-CNN region detector (TIGEr's)",
    "detector:x152-fpn": "a converted X152-FPN Faster R-CNN region detector (ViLBERTScore's)",
    "captioner": "a BLIP captioner (transformers BlipForConditionalGeneration)",
}
CASES = [("clipscore", "polos"), ("clipscore", "roberta"), ("clipscore", "tiger originals"), ("pacscore", "vilbert"),
         ("pacscore", "no config"), ("emscore", "polos"), ("emscore", "roberta"), ("emscore", "empty"),
         ("tigerscore", "clip"), ("tigerscore", "vilbert"), ("tigerscore", "bottom-up"),
         ("vilbertscore", "roberta"), ("vilbertscore", "scan"), ("bridge", "clip"), ("bridge", "polos"),
         ("polos", "clip"), ("polos", "roberta"), ("polos", "bridge"), ("detector:bottom-up", "scan"),
         ("detector:bottom-up", "tiger originals"), ("detector:x152-fpn", "bottom-up"), ("captioner", "clip"),
         ("captioner", "empty")]


@pytest.mark.parametrize("loader, kind", CASES)
def test_a_folder_of_another_kind_is_refused_in_one_line(loader: str, kind: str, tmp_path: Path,
                                                         capfd: pytest.CaptureFixture) -> None:
    folder = FOLDERS[kind](tmp_path / "model")
    with pytest.raises(WrongModelFolderError) as refused:
        load_with(loader, folder)
    message = str(refused.value)
    assert message.startswith(f"model folder {folder} {HOLDS[kind]} where {NEEDS[loader]} is needed")
    assert "\n" not in message and "`capeval download " in message
    assert capfd.readouterr().err == ""


def test_the_subfolder_of_the_kind_needed_is_named(tmp_path: Path) -> None:
    folder = polos_folder(tmp_path / "polos")
    with pytest.raises(WrongModelFolderError, match=r"where a converted CLIP model is needed \(its subfolder clip "
                                                    r"is one\): `capeval download openai/clip-vit-base-patch32`"):
        load_with("clipscore", folder)


def test_a_folder_of_its_kind_lacking_a_file_is_named(tmp_path: Path) -> None:
    folder = polos_folder(tmp_path / "polos")
    (folder / "clip" / "preprocessor_config.json").unlink()
    with pytest.raises(WrongModelFolderError, match=rf"^model folder {folder / 'clip'} is a converted CLIP model but "
                                                    r"lacks preprocessor_config.json: copy or write the folder again"):
        load_with("polos", folder)


def test_weights_of_another_model_under_a_clip_config_are_refused(tiny_openai_clip, tmp_path: Path,
                                                                  capfd: pytest.CaptureFixture) -> None:
    """A CLIP config over another model's weights: transformers would print its load report and start the missing
    tensors from random values; the loader refuses the weight file in one line and prints nothing."""
    from safetensors.torch import save_file

    from capeval import CLIPScore

    folder = Path(shutil.copytree(tiny_openai_clip.hf_dir, tmp_path / "clip"))
    (folder / "capeval_checksums.json").unlink()
    save_file({"encoder.layer.0.weight": torch.zeros(2, 2)}, str(folder / "model.safetensors"))
    with pytest.raises(WrongModelFolderError, match=rf"^{folder / 'model.safetensors'} does not hold the weights of "
                                                    r"the 'clip' model its config.json describes: tensors \d+ missing "
                                                    r"\(such as [^)]+\), 1 unexpected \(such as encoder.layer.0"):
        CLIPScore(model=folder, device="cpu")
    printed = capfd.readouterr()
    assert "UNEXPECTED" not in printed.out + printed.err and "MISSING" not in printed.out + printed.err


@pytest.mark.parametrize("metric, kind", [("clipscore", "polos"), ("tigerscore", "clip"), ("polos", "roberta")])
def test_the_command_line_prints_one_line(metric: str, kind: str, tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    folder = FOLDERS[kind](tmp_path / "model")
    assert main(["score", "--metric", metric, "--images", str(EXAMPLES / "images"), "--candidates",
                 str(EXAMPLES / "good_captions.json"), "--references", str(EXAMPLES / "refs.json"),
                 "--model", str(folder), "--device", "cpu"]) == 2
    printed = capfd.readouterr()
    assert printed.out == ""
    assert printed.err.startswith(f"capeval score: error: model folder {folder} {HOLDS[kind]} where "
                                  f"{NEEDS[metric]} is needed")
    assert len(printed.err.strip().splitlines()) == 1

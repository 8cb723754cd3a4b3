"""Where every model capeval loads comes from: one table, :data:`SOURCES`, naming for each model of
:data:`capeval.registry.MODELS` the original files its authors publish (URL, licence, size, sha256 where known), the
conversion that turns them into the folder capeval loads, and the function that resolves that folder.

Read by the fetcher (:mod:`capeval.fetch`: a model that is neither a local folder nor on the hub is built from its
originals), by ``capeval download``, and by ``hub_models/generate_configs.py``, which writes each model card's list of
original files from :func:`card_section`; the README's table of download sizes is :func:`readme_table`.

A pure data module like the registry (the only capeval module it reads): converters and folder resolvers are named by
dotted path and imported on use.
"""
from __future__ import annotations

from typing import Dict, NamedTuple, Optional, Tuple

from capeval.registry import MODELS

DRIVE_FOLDER_PREFIX = "https://drive.google.com/drive/folders/"
SECTION_START, SECTION_END = "<!--originals-->", "<!--/originals-->"
"""Markers around the generated list of original files in a model card."""


class OriginalFile(NamedTuple):
    """One file as its authors publish it."""

    name: str
    """The file's name: in the cache, under ``CAPEVAL_ORIGINALS_MIRROR``, and as given to ``capeval download
    --original``; unique across the table."""
    argument: str
    """The converter's parameter that receives the file's path."""
    url: str
    """Where its authors publish it: a download URL, or a Google Drive folder (``drive.google.com/drive/folders/``)
    in which :attr:`drive_path` names it."""
    licence: str
    estimated_size: int
    """Bytes, estimated from the tensors capeval converts (parameter count times bytes per value; a lower bound when
    the file holds more) where :attr:`size` is unknown: shown to users, checked against the free disk space, and,
    while :attr:`size` is unknown, the size a file must be within :data:`SIZE_TOLERANCE` of."""
    size: Optional[int] = None
    """Exact size in bytes once someone has observed it; a download of another size is refused."""
    sha256: Optional[str] = None
    """Once someone has observed it; a download with another sha256 is refused. Every converted folder records the
    sha256 it was converted from, known here or not."""
    drive_path: Optional[str] = None
    """Path of the file inside the Google Drive folder :attr:`url` (the file is found there by this path, never by a
    per-file link: the PAC-S README links both PAC-S checkpoints to one file)."""

    @property
    def drive_folder_id(self) -> Optional[str]:
        """The Google Drive folder id of :attr:`url`, or ``None`` for a plain download URL."""
        if not self.url.startswith(DRIVE_FOLDER_PREFIX):
            return None
        return self.url[len(DRIVE_FOLDER_PREFIX):].split("?")[0].split("/")[0]


class ModelSource(NamedTuple):
    """How the folder of one registry model is had: from the hub, or built from its original files."""

    folder: str
    """``module:function`` resolving the model's folder with the files its loader reads (local folder, cache, hub,
    originals)."""
    published_by: str
    """Who publishes the originals (or the model), for messages and cards."""
    files: Tuple[OriginalFile, ...] = ()
    """The original files; empty for a model that exists only on the hub."""
    converter: Optional[str] = None
    """``module:function`` converting the files, called with each file's :attr:`OriginalFile.argument`, the
    :attr:`arguments` and :attr:`output_argument` (the folder to write)."""
    arguments: Tuple[Tuple[str, object], ...] = ()
    output_argument: str = "out_dir"
    notice: Optional[str] = None
    """A known problem of the source, said in every error about it, with what to do."""
    no_original: Optional[str] = None
    """Why the model has no original files to fetch (for a model with no :attr:`files`)."""
    published: bool = True
    """Whether its weights exist anywhere yet (``capeval download --all`` fetches the published models)."""
    nltk_data: Tuple[str, ...] = ()
    """NLTK data packages the metric using this model loads at run time (keys of :data:`NLTK_RESOURCES`), fetched
    with it by ``capeval download``."""


NLTK_RESOURCES: Dict[str, str] = {"punkt_tab": "tokenizers/punkt_tab/english/",
                                  "averaged_perceptron_tagger_eng": "taggers/averaged_perceptron_tagger_eng/"}
"""NLTK data package -> the resource capeval loads from it: TIGEr's tokenizer, BRIDGE's part-of-speech tagger."""

CLIP_FOLDER = "capeval.models.clip.loading:model_folder"
CLIP_CONVERTER = "conversion.clip_converter:convert_checkpoint"
PACS_DRIVE = f"{DRIVE_FOLDER_PREFIX}15Da_nh7CYv8xfryIdETG6dPFSqcBiqpd"
PACS_PUBLISHER = "the PAC-S authors (aimagelab/pacscore README)"
PACS_LICENCE = "none stated by the authors (base model OpenAI CLIP: MIT)"
PACSPP_BASE = "https://ailb-web.ing.unimore.it/publicfiles/pac++/"
PACSPP_NOTICE = (
    "The PAC-S++ links of the aimagelab/pacscore README (ailb-web.ing.unimore.it/publicfiles/pac++/) have answered "
    "403 Forbidden since early 2026 (aimagelab/pacscore issues 7 and 8). Ask the authors on those issues for the "
    "file, then give it to capeval with `capeval download {model} --original PATH`, or put it on an internal mirror "
    "and set CAPEVAL_ORIGINALS_MIRROR."
)
TIGER_DRIVE = f"{DRIVE_FOLDER_PREFIX}11eMgUHUD_6LLK9JmiiWCbuHjh0u2OgA1"
POLOS_ENCODER_BASE = "https://huggingface.co/princeton-nlp/sup-simcse-roberta-base/resolve/main/"
VILBERT_BASE = "https://dl.fbaipublicfiles.com/vilbert-multi-task/"
BOTTOM_UP_BASE = "https://huggingface.co/unc-nlp/frcnn-vg-finetuned/resolve/main/"

CLIP_BPE = OriginalFile(
    "bpe_simple_vocab_16e6.txt.gz", "bpe_path",
    "https://raw.githubusercontent.com/openai/CLIP/d05afc436d78f1c48dc0dbf8e5980a9d471f35f6/clip/"
    "bpe_simple_vocab_16e6.txt.gz", "MIT", 1356917, size=1356917,
    sha256="924691ac288e54409236115652ad4aa250f48203de50a9e4722a6ecd48d6804a")
"""OpenAI's BPE merges, from which the converter builds every CLIP tokenizer (the same bytes ship in the clip,
open_clip and pacscore repositories)."""


def _pacs(name: str, parameters: int) -> OriginalFile:
    return OriginalFile(name, "checkpoint", PACS_DRIVE, PACS_LICENCE, parameters * 4, drive_path=name)


def _pacspp(name: str, parameters: int) -> OriginalFile:
    return OriginalFile(name, "checkpoint", PACSPP_BASE + name, PACS_LICENCE, parameters * 4)


SIZE_TOLERANCE = 10
"""A file whose exact size is not recorded is refused when it is more than this many times smaller or larger than
its estimate (:func:`accepted_sizes`): the estimates count the tensors the converter reads, which a file may hold in
half precision or compressed, or beside more (optimizer state), but a file ten times off is another file (a page,
a truncated transfer, a different checkpoint)."""

VIT_B_32_PARAMETERS, VIT_L_14_PARAMETERS = 151_277_313, 427_616_513
"""Parameters of the full-size OpenAI / OpenCLIP towers (the two ViT-L/14 have the same count)."""

SOURCES: Dict[str, ModelSource] = {
    "openai/clip-vit-base-patch32": ModelSource(
        CLIP_FOLDER, "OpenAI (the clip package's download URL, whose path is the file's sha256)",
        (OriginalFile("ViT-B-32.pt", "checkpoint", "https://openaipublic.azureedge.net/clip/models/"
                      "40d365715913c9da98579312b702a82c18be219cc2a73407c4526f58eba950af/ViT-B-32.pt", "MIT",
                      VIT_B_32_PARAMETERS * 2,
                      sha256="40d365715913c9da98579312b702a82c18be219cc2a73407c4526f58eba950af"),
         CLIP_BPE),
        CLIP_CONVERTER, (("arch", "openai"),)),
    "capeval/pacs-clip-vit-b-32": ModelSource(
        CLIP_FOLDER, PACS_PUBLISHER, (_pacs("clip_ViT-B-32.pth", VIT_B_32_PARAMETERS), CLIP_BPE), CLIP_CONVERTER,
        (("arch", "openai"),)),
    "capeval/pacs-openclip-vit-l-14": ModelSource(
        CLIP_FOLDER, PACS_PUBLISHER, (_pacs("openClip_ViT-L-14.pth", VIT_L_14_PARAMETERS), CLIP_BPE),
        CLIP_CONVERTER, (("arch", "openclip"),)),
    "capeval/pacspp-clip-vit-b-32": ModelSource(
        CLIP_FOLDER, PACS_PUBLISHER, (_pacspp("PAC++_clip_ViT-B-32.pth", VIT_B_32_PARAMETERS), CLIP_BPE),
        CLIP_CONVERTER, (("arch", "openai"), ("lora", "merge")), notice=PACSPP_NOTICE),
    "capeval/pacspp-clip-vit-l-14": ModelSource(
        CLIP_FOLDER, PACS_PUBLISHER, (_pacspp("PAC++_clip_ViT-L-14.pth", VIT_L_14_PARAMETERS), CLIP_BPE),
        CLIP_CONVERTER, (("arch", "openai"), ("lora", "merge")), notice=PACSPP_NOTICE),
    "capeval/bridge-clip-vit-b-32": ModelSource(
        "capeval.models.bridge.loading:model_folder", "capeval",
        no_original="BRIDGE's authors released no weights: this model is capeval's own, trained with "
                    "`capeval train bridge`, and is not published yet; pass model=<folder> of a trained model",
        published=False),
    "Salesforce/blip-image-captioning-large": ModelSource(
        "capeval.models.bridge.templates:captioner_folder", "Salesforce, on the Hugging Face hub",
        no_original="its authors publish it on the Hugging Face hub only",
        nltk_data=("averaged_perceptron_tagger_eng",)),
    "capeval/tiger-scan-coco": ModelSource(
        "capeval.models.scan.loading:model_folder", "the TIGEr authors (SeleenaJM/CapEval README)",
        (OriginalFile("model_best.pth", "checkpoint", TIGER_DRIVE, "none stated by the authors (research use)",
                      13_651_020 * 4, drive_path="runs/coco_scan/log/model_best.pth"),
         OriginalFile("coco_precomp_vocab.json", "vocab",
                      "https://raw.githubusercontent.com/SeleenaJM/CapEval/2b41a92d781899daeb8513ce3806cbfb81930a47/"
                      "vocab/coco_precomp_vocab.json", "MIT", 401570, size=401570,
                      sha256="91b208d4673b076bdb3fc8a1441eb4b55cadc6f5be0137d89672f4abd21c9541")),
        "conversion.scan_converter:convert", output_argument="out", nltk_data=("punkt_tab",)),
    "capeval/bottom-up-frcnn-r101-vg": ModelSource(
        "capeval.models.regions.detectors:detector_folder",
        "unc-nlp on the Hugging Face hub (the transformers lxmert port of the bottom-up attention detector)",
        (OriginalFile("pytorch_model.bin", "checkpoint", BOTTOM_UP_BASE + "pytorch_model.bin", "Apache-2.0",
                      65_545_166 * 4),
         OriginalFile("config.yaml", "config_yaml", BOTTOM_UP_BASE + "config.yaml", "Apache-2.0", 7_000)),
        "conversion.regions_converter:convert_checkpoint", (("detector", "bottom-up"),)),
    "capeval/vilbert-multi-task": ModelSource(
        "capeval.models.vilbert.loading:model_folder", "facebookresearch/vilbert-multi-task (README)",
        (OriginalFile("multi_task_model.bin", "checkpoint", VILBERT_BASE + "multi_task_model.bin", "MIT",
                      220_494_592 * 4),
         OriginalFile("bert_base_6layer_6conect.json", "original_config",
                      "https://raw.githubusercontent.com/facebookresearch/vilbert-multi-task/"
                      "f22b84a9918a9aea2106e14ac1f6b32ad71492e3/config/bert_base_6layer_6conect.json", "MIT", 824,
                      size=824, sha256="79d5061e494514ebfe250c05f51156282c4735471415708d48fa3d62983ec27f"),
         OriginalFile("vocab.txt", "vocab",
                      "https://huggingface.co/google-bert/bert-base-uncased/resolve/main/vocab.txt", "Apache-2.0",
                      231_508)),
        "conversion.vilbert_converter:convert", output_argument="out"),
    "capeval/vilbert-detector-x152-fpn": ModelSource(
        "capeval.models.regions.detectors:detector_folder", "facebookresearch/vilbert-multi-task (data/README.md)",
        (OriginalFile("detectron_model.pth", "checkpoint", VILBERT_BASE + "detectron_model.pth", "MIT",
                      193_252_368 * 4),
         OriginalFile("detectron_config.yaml", "config_yaml", VILBERT_BASE + "detectron_config.yaml", "MIT", 4_000)),
        "conversion.regions_converter:convert_checkpoint", (("detector", "x152-fpn"),)),
    "capeval/polos-clip-vit-b-32": ModelSource(
        "capeval.models.polos.loading:model_folder",
        "the Polos authors (keio-smilab24/Polos README; the polos package's download_model)",
        (OriginalFile("reprod.zip", "checkpoint", "https://polos-polaris.s3.ap-northeast-1.amazonaws.com/reprod.zip",
                      "BSD-3-Clause-Clear (the polos package)",
                      (124_645_632 + 16_814_593) * 4 + VIT_B_32_PARAMETERS * 2),
         OriginalFile("config.json", "encoder_config", POLOS_ENCODER_BASE + "config.json", "MIT (SimCSE)", 700),
         OriginalFile("vocab.json", "vocab", POLOS_ENCODER_BASE + "vocab.json", "MIT (SimCSE)", 898_823),
         OriginalFile("merges.txt", "merges", POLOS_ENCODER_BASE + "merges.txt", "MIT (SimCSE)", 456_318),
         CLIP_BPE),
        "conversion.polos_converter:convert", output_argument="out"),
}
"""Registry model name -> :class:`ModelSource`: every key of :data:`capeval.registry.MODELS`."""


def human_size(size: int) -> str:
    """``1.7 GB``, ``605 MB``, ``1.4 MB``, ``824 bytes`` (decimal units)."""
    for unit, scale in (("GB", 10 ** 9), ("MB", 10 ** 6), ("kB", 10 ** 3)):
        if size >= scale:
            value = size / scale
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{size} bytes"


def shown_size(file: OriginalFile) -> str:
    """The exact size where known, else ``about`` the estimate."""
    return f"{file.size:,} bytes" if file.size is not None else f"about {human_size(file.estimated_size)}"


def accepted_sizes(file: OriginalFile) -> Tuple[int, int]:
    """The smallest and largest size in bytes accepted for ``file``: its exact size where recorded, else its estimate
    divided and multiplied by :data:`SIZE_TOLERANCE`."""
    if file.size is not None:
        return file.size, file.size
    return file.estimated_size // SIZE_TOLERANCE, file.estimated_size * SIZE_TOLERANCE


def download_size(source: ModelSource) -> int:
    """Bytes of all of a model's original files (exact where known, else estimated)."""
    return sum(file.size if file.size is not None else file.estimated_size for file in source.files)


def where_published(file: OriginalFile) -> str:
    """Markdown: the URL, or the Drive folder and the path in it."""
    if file.drive_folder_id is not None:
        return f"[Google Drive folder]({file.url}), file `{file.drive_path}`"
    return f"<{file.url}>"


def conversion_call(source: ModelSource, folder: str = "<folder>") -> str:
    """The converter call the fetcher makes, as Python: ``convert_checkpoint(checkpoint='...', ..., out_dir=...)``."""
    arguments = [f"{file.argument}={file.name!r}" for file in source.files]
    arguments += [f"{name}={value!r}" for name, value in source.arguments]
    module, function = (source.converter or "").split(":")
    return f"{module}.{function}({', '.join(arguments)}, {source.output_argument}={folder})"


def card_section(model: str) -> str:
    """The list of original files in the card of ``model``, between :data:`SECTION_START` and :data:`SECTION_END`."""
    source = SOURCES[model]
    lines = [SECTION_START, "", f"Original files, published by {source.published_by}:", "",
             "| file | published at | licence | size | sha256 |", "| --- | --- | --- | --- | --- |"]
    for file in source.files:
        sha = f"`{file.sha256}`" if file.sha256 else "not yet recorded (each converted folder records what it saw)"
        lines.append(f"| `{file.name}` | {where_published(file)} | {file.licence} | {shown_size(file)} | {sha} |")
    lines += ["", f"`capeval download {model}` (or the first use of `{model}` when its hub repository cannot be had) "
                  "downloads them, checks them, and converts them with", "", "```python",
              conversion_call(source), "```", "",
              "which also records the size and sha256 of the folder's `model.safetensors` in "
              "`capeval_checksums.json` (not uploaded to the hub); capeval checks them whenever it loads the folder."]
    if source.notice:
        lines += ["", source.notice.format(model=model)]
    return "\n".join(lines + ["", SECTION_END])


def readme_table() -> str:
    """The README's table: each model with original files, what loads it by default, its original files, their
    publisher and the total download size."""
    lines = ["| model | default of | original files | from | download |", "| --- | --- | --- | --- | ---: |"]
    for model, source in SOURCES.items():
        if source.files:
            users = ", ".join(user.replace("detector:", "detector ") for user in MODELS[model].default_for) or "-"
            names = ", ".join(f"`{file.name}`" for file in source.files)
            exact = all(file.size is not None for file in source.files)
            size = human_size(download_size(source))
            lines.append(f"| `{model}` | {users} | {names} | {source.published_by} | "
                         f"{size if exact else 'about ' + size} |")
    return "\n".join(lines)

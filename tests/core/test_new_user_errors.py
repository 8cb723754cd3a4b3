"""What a new user hits: wrong inputs that must fail early and clearly, progress, per-metric models, quiet start-up.

Each test is named after the problem it guards against; none needs a network or a GPU.
"""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import evaluate
import numpy as np
import pytest
import torch
from PIL import Image

import capeval
from capeval import CLIPScore, InputError, ModelNotAvailableError, PACScore
from capeval.benchmarks import BenchmarkFormatError, builtin_metrics, load_benchmark, run_benchmark
from capeval.commands.benchmark import split_models
from capeval.cli import main
from capeval.inputs import validate_image
from capeval.options import checked_device
from fixtures.paths import REPO_ROOT, TESTS_DATA

EXAMPLES = REPO_ROOT / "examples" / "clipscore"
IMAGES = [EXAMPLES / "images" / "image1.jpg", EXAMPLES / "images" / "image2.jpg"]
BENCHMARK_DATA = TESTS_DATA / "benchmarks"


def score_command(model: Path, *extra: str, candidates: Path = EXAMPLES / "good_captions.json") -> list:
    return ["score", "--metric", "clipscore", "--images", str(EXAMPLES / "images"), "--candidates", str(candidates),
            "--model", str(model), "--device", "cpu", *extra]


# 1. a single value where a list is expected ---------------------------------------------------------------------

@pytest.mark.parametrize("images", [str(EXAMPLES / "images"), EXAMPLES / "images"])
def test_a_folder_given_as_images_is_refused(tiny_openai_clip, images) -> None:
    with pytest.raises(InputError, match=r"^images must be a list of images .*, got a single (str|PosixPath|WindowsPath)"):
        CLIPScore(model=tiny_openai_clip.hf_dir).score(images, ["a cat", "a dog"])


def test_evaluate_refuses_a_single_prediction_string(tiny_openai_clip) -> None:
    module = evaluate.load(str(REPO_ROOT / "metrics" / "clipscore"))
    with pytest.raises(InputError, match=r"^predictions must be a list of strings, got a single str \('a cat'\)"):
        module.compute(predictions="a cat", images=[IMAGES[0]], model=str(tiny_openai_clip.hf_dir))
    with pytest.raises(InputError, match=r"^images must be a list of images .*, got a single str"):
        module.compute(predictions=["a cat"], images=str(IMAGES[0]), model=str(tiny_openai_clip.hf_dir))


# 2. palette images, on the oldest and the newest supported Pillow ------------------------------------------------

OLDEST_PILLOW = "9.2.0"
"""The floor of ``pillow`` in setup.cfg: the oldest release with wheels for every supported CPython up to 3.11."""

PALETTE_KEYS_SCRIPT = """
import io, json, sys
import numpy as np
import PIL
from PIL import Image
from capeval.inputs import validate_image

image = Image.fromarray((np.arange(96, dtype=np.uint8) % 40).reshape(8, 12), mode="P")
image.putpalette([(7 * i + 3) % 256 for i in range(3 * 40)])
keys = {}
for kind, options in (("png", {}), ("png-transparency", {"transparency": 5}), ("gif", {})):
    encoded = io.BytesIO()
    image.save(encoded, kind.split("-")[0].upper(), **options)
    opened = Image.open(io.BytesIO(encoded.getvalue()))  # palette still raw file data until loaded
    keys[kind] = validate_image(opened, 0).key
keys["in-memory"] = validate_image(image, 0).key
print(json.dumps({"pillow": PIL.__version__, "keys": keys}))
"""


def _palette_keys(python_path: str) -> dict:
    completed = subprocess.run([sys.executable, "-c", PALETTE_KEYS_SCRIPT], capture_output=True, text=True,
                               env={**os.environ, "PYTHONPATH": python_path}, timeout=120)
    assert completed.returncode == 0, completed.stderr[-2000:]
    return json.loads(completed.stdout)


def test_palette_images_hash_alike_on_oldest_and_newest_pillow(tmp_path) -> None:
    floor = re.search(r"^\s*pillow>=([\d.]+)$", (REPO_ROOT / "setup.cfg").read_text(), re.M | re.I).group(1)
    assert OLDEST_PILLOW.startswith(floor + ".")
    target = tmp_path / "oldest-pillow"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--only-binary=:all:", "--target",
         str(target), f"pillow=={OLDEST_PILLOW}"], capture_output=True, text=True, timeout=300)
    if installed.returncode != 0:
        pytest.skip(f"cannot install pillow=={OLDEST_PILLOW} from a package index: {installed.stderr.strip()[-300:]}")
    newest = _palette_keys(str(REPO_ROOT))
    oldest = _palette_keys(os.pathsep.join([str(target), str(REPO_ROOT)]))
    assert oldest["pillow"] == OLDEST_PILLOW and newest["pillow"] != OLDEST_PILLOW
    assert oldest["keys"] == newest["keys"]
    # same indices and used colours: PNG (with or without transparency), GIF (palette padded) and in-memory agree
    assert len(set(newest["keys"].values())) == 1


def test_palette_key_follows_the_colours_the_pixels_use() -> None:
    pixels = (np.arange(24, dtype=np.uint8) % 4).reshape(4, 6)
    image = Image.fromarray(pixels, mode="P")
    image.putpalette([10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120])
    padded = Image.fromarray(pixels, mode="P")
    padded.putpalette([10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120] + [255] * 12)  # unused entries
    recoloured = Image.fromarray(pixels, mode="P")
    recoloured.putpalette([10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 121])
    assert validate_image(image, 0).key == validate_image(padded, 0).key
    assert validate_image(image, 0).key != validate_image(recoloured, 0).key
    encoded = io.BytesIO()
    image.save(encoded, "BMP")  # BMP and TIFF palettes stay raw file data: ImagePalette.tobytes() refuses them
    assert validate_image(Image.open(io.BytesIO(encoded.getvalue())), 0).key == validate_image(image, 0).key


# 3. a closed PIL image ---------------------------------------------------------------------------------------------

def test_closed_image_is_named(tiny_openai_clip) -> None:
    closed = Image.open(IMAGES[1])
    closed.load()
    closed.close()
    with pytest.raises(InputError, match=r"^images\[1\] \(PIL RGB \d+x\d+\) cannot be read \(a closed or unloadable "
                                         r"PIL image\): Operation on closed image$"):
        CLIPScore(model=tiny_openai_clip.hf_dir).score([IMAGES[0], closed], ["a cat", "a dog"])


# 4. a device that is not there -------------------------------------------------------------------------------------

def test_cuda_without_a_gpu_says_so(tiny_openai_clip, monkeypatch, capsys) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(InputError, match=r"^device='cuda': no CUDA device is available; available devices: cpu"):
        CLIPScore(model=tiny_openai_clip.hf_dir, device="cuda")
    assert main(score_command(tiny_openai_clip.hf_dir)[:-2] + ["--device", "cuda:1"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("capeval score: error: --device cuda:1: no CUDA device is available") and \
        error.count("\n") == 1
    with pytest.raises(InputError, match="is not a torch device name"):
        CLIPScore(model=tiny_openai_clip.hf_dir, device="gpu0")


def test_a_cuda_index_that_does_not_exist_lists_the_devices(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(InputError, match=r"^device='cuda:3': there is no CUDA device 3; available devices: cpu, "
                                         r"cuda:0(, mps)?$"):
        checked_device("cuda:3")
    assert checked_device("cuda:0") == torch.device("cuda:0")


# 5. a model path that is not a converted model folder ---------------------------------------------------------------

def test_missing_folder_and_checkpoint_file_as_model(tiny_openai_clip, tmp_path, capsys) -> None:
    with pytest.raises(ModelNotAvailableError, match=r"^model='/some/missing/folder': no such folder"):
        PACScore(model="/some/missing/folder")
    with pytest.raises(ModelNotAvailableError, match="no such folder"):
        PACScore(model=tmp_path / "missing")
    with pytest.raises(ModelNotAvailableError, match=r"is a checkpoint file.*convert it first with "
                                                     r"conversion/convert_clip\.py"):
        PACScore(model=tiny_openai_clip.checkpoint)
    with pytest.raises(ModelNotAvailableError, match=r"no such file.*conversion/convert_clip\.py"):
        PACScore(model="clip_ViT-B-32.pth")
    assert main(score_command(tmp_path / "missing")) == 2
    assert f"error: --model {tmp_path / 'missing'}: no such folder" in capsys.readouterr().err


# 6. numeric options of the wrong type ---------------------------------------------------------------------------------

@pytest.mark.parametrize("options, message", [
    ({"batch_size": "64"}, "batch_size must be a positive integer, got str '64'"),
    ({"text_batch_size": 0}, "text_batch_size must be a positive integer, got 0"),
    ({"chunk_size": 1.5}, "chunk_size must be a positive integer, got float 1.5"),
    ({"num_workers": True}, "num_workers must be a non-negative integer, got bool True"),
])
def test_numeric_options_are_checked(tiny_openai_clip, options, message) -> None:
    with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
        CLIPScore(model=tiny_openai_clip.hf_dir, **options)


def test_benchmark_numeric_options_are_checked() -> None:
    benchmark = load_benchmark("nebula", BENCHMARK_DATA / "nebula")

    def length(images, candidates, references):
        return [float(len(candidate)) for candidate in candidates]

    length.needs_images = False
    for options, message in (({"n_resamples": "10"}, "n_resamples must be a positive integer, got str '10'"),
                             ({"confidence": 95}, "confidence must be a number strictly between 0 and 1, got 95"),
                             ({"seed": 1.5}, "seed must be an integer, got float 1.5")):
        with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
            run_benchmark(benchmark, {"length": length}, **options)


# 7. command-line files ------------------------------------------------------------------------------------------------

def test_duplicated_candidate_key_is_refused(tiny_openai_clip, tmp_path, capsys) -> None:
    candidates = tmp_path / "candidates.json"
    candidates.write_text('{"image1": "a cat", "image2": "a dog", "image1": "two cats"}')
    assert main(score_command(tiny_openai_clip.hf_dir, candidates=candidates)) == 2
    assert f"{candidates}: key 'image1' appears more than once" in capsys.readouterr().err


def test_candidates_file_given_as_references_warns_once_with_a_count(tiny_openai_clip, capsys) -> None:
    code = main(score_command(tiny_openai_clip.hf_dir, "--references", str(EXAMPLES / "bad_captions.json")))
    assert code == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if ": warning: " in line]
    assert warnings == [f"capeval score: warning: every value of the references file {EXAMPLES / 'bad_captions.json'} "
                        "is a single string (2 keys), each read as one reference; is it a candidates file?"]


def test_bad_output_path_fails_before_any_model_work(tmp_path, capsys) -> None:
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    for output, message in (
        (tmp_path, f"output {tmp_path} is a folder; give a file name, e.g. {tmp_path / 'scores.json'}"),
        (not_a_folder / "scores.json", f"output folder not found: {not_a_folder}"),
    ):
        # the model does not exist: reaching it would fail with another message
        assert main(score_command(tmp_path / "no-model", "--output", str(output))) == 2
        assert capsys.readouterr().err == f"capeval score: error: {message}\n"
    assert main(["benchmark", "--dataset", "nebula", "--data-root", str(BENCHMARK_DATA / "nebula"), "--metric",
                 "clip_s", "--model", str(tmp_path / "no-model"), "--output", str(not_a_folder)]) == 2
    assert capsys.readouterr().err == f"capeval benchmark: error: output {not_a_folder} is a file; give a folder " \
                                      "for the report files\n"


# 8. the Polaris / Nebula JSON layout -------------------------------------------------------------------------------

def test_nebula_json_layout_is_read(tmp_path) -> None:
    from_csv = load_benchmark("nebula", BENCHMARK_DATA / "nebula")
    records = [{"imgid": item.image.removesuffix(".jpg"), "mt": item.candidate, "refs": list(item.references),
                "score": item.human} for item in from_csv.items]
    path = tmp_path / "nebula_test.json"
    path.write_text(json.dumps(records))
    for root in (path, tmp_path):
        from_json = load_benchmark("nebula", root)
        assert [(i.image, i.candidate, i.references, i.human) for i in from_json.items] == \
            [(i.image, i.candidate, i.references, i.human) for i in from_csv.items]
        assert from_json.source == f"json:{path}" and from_json.image_dir == str(tmp_path / "images")
    (tmp_path / "nebula_test.txt").write_text("imgid mt refs score\n")
    with pytest.raises(BenchmarkFormatError, match=r"not a layout of benchmark 'nebula' \(a \.csv, \.json or "
                                                   r"\.parquet file, or a folder of them\).*nebula_<split>\.json"):
        load_benchmark("nebula", tmp_path / "nebula_test.txt")
    path.write_text(json.dumps([{"imgid": "x", "mt": "a cat", "score": 1}]))
    with pytest.raises(BenchmarkFormatError, match=r"nebula_test\.json entry 0: missing key\(s\) refs"):
        load_benchmark("nebula", path)


# 9 and 10. benchmark progress and per-metric models -----------------------------------------------------------------

CAPTIONS = ("a cat", "a dog on a rug", "two people walk", "a red bus", "a bowl of soup", "a tree in the snow",
            "boats on the sea", "a man riding a horse")


def _nebula_json(folder: Path) -> Path:
    """``nebula_test.json`` with 8 rated captions of random-noise images (a tiny model scores them apart)."""
    (folder / "images").mkdir(parents=True)
    generator = np.random.default_rng(0)
    records = []
    for index, caption in enumerate(CAPTIONS):
        pixels = generator.integers(0, 256, size=(40, 30, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / "images" / f"n{index}.jpg")
        records.append({"imgid": f"n{index}", "mt": caption, "refs": [CAPTIONS[-1 - index], "a photo"],
                        "score": float(index % 5)})
    (folder / "nebula_test.json").write_text(json.dumps(records))
    return folder


def test_benchmark_shows_progress_and_takes_a_model_per_metric(tiny_openai_clip, tiny_openclip, tmp_path,
                                                               capsys) -> None:
    data = _nebula_json(tmp_path / "nebula")
    code = main(["benchmark", "--dataset", "nebula", "--data-root", str(data), "--images", str(data / "images"),
                 "--metric", "cider", "--metric", "clip_s", "--metric", "pac_s", "--bootstrap", "30",
                 "--model", f"clip_s={tiny_openai_clip.hf_dir}", "--model", f"pac_s={tiny_openclip.hf_dir}",
                 "--device", "cpu", "--output", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-2000:]
    for bar in ("scoring cider", "scoring clip_s", "scoring pac_s", "encoding images", "encoding texts",
                "bootstrap cider", "bootstrap clip_s", "bootstrap pac_s"):
        assert f"{bar}:" in captured.err, bar
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    assert report["benchmark"]["n_items"] == len(CAPTIONS)
    assert report["metrics"]["clip_s"]["signature"].startswith(f"clip_score|model:{tiny_openai_clip.hf_dir}|")
    assert report["metrics"]["pac_s"]["signature"].startswith(f"pac_score|model:{tiny_openclip.hf_dir}|")


def test_ambiguous_models_are_refused(tiny_openai_clip, capsys) -> None:
    model = str(tiny_openai_clip.hf_dir)
    with pytest.raises(InputError, match=r"one model for clip_s, ref_pac_s is ambiguous \(clipscore and pacscore"):
        builtin_metrics(["clip_s", "ref_pac_s"], model=model)
    with pytest.raises(InputError, match=r"a model is given for pac_s, which is not among the selected"):
        builtin_metrics(["clip_s"], models={"pac_s": model})
    with pytest.raises(InputError, match="is given for no metric"):
        builtin_metrics(["cider"], model=model)
    with pytest.raises(InputError, match=r"--model given 2 times without a metric"):
        split_models(["a/b", "c/d"])
    with pytest.raises(InputError, match=r"--model given twice for pac_s"):
        split_models(["pac_s=a/b", "pac_s=c/d"])
    with pytest.raises(InputError, match=r"--model cider=a/b: cider takes no model"):
        split_models(["cider=a/b"])
    assert split_models(["clip_s=x", "folder=with=equals"]) == ("folder=with=equals", {"clip_s": "x"})
    pair = builtin_metrics(["clip_s", "ref_clip_s", "pac_s"], model=None, models={"clip_s": model, "ref_clip_s": model,
                                                                                 "pac_s": model}, device="cpu")
    assert pair["clip_s"].scorer is pair["ref_clip_s"].scorer and pair["pac_s"].scorer is not pair["clip_s"].scorer
    assert main(["benchmark", "--dataset", "nebula", "--data-root", str(BENCHMARK_DATA / "nebula"), "--metric",
                 "clip_s", "--metric", "pac_s", "--model", model]) == 2
    assert "ambiguous" in capsys.readouterr().err


# 11. the benchmark API and errors in flags ---------------------------------------------------------------------------

def test_readme_benchmark_example_runs(tmp_path, monkeypatch, capeval_test_data) -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    example = re.search(r"```python\n(from capeval\.benchmarks import .*?)```", readme, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(example.replace("../shared/data", str(capeval_test_data)), namespace)  # noqa: S102 - the documented example
    result = namespace["result"]
    assert result.benchmark.name == "pascal-50s" and set(result.metrics) == {"length"}
    assert (tmp_path / "results" / "pascal-50s" / "results.json").is_file()


def test_cli_errors_speak_in_flags(tiny_openai_clip, capeval_test_data, capsys) -> None:
    assert main(["benchmark", "--dataset", "pascal-50s", "--metric", "cider"]) == 2
    error = capsys.readouterr().err
    assert "needs --data-root" in error and "root=" not in error
    assert main(["benchmark", "--dataset", "polaris", "--metric", "cider"]) == 2
    error = capsys.readouterr().err
    assert "--source hub" in error and "source=" not in error and "root=" not in error
    assert main(["benchmark", "--dataset", "pascal-50s", "--data-root", str(capeval_test_data / "pascal50s"),
                 "--metric", "clip_s", "--model", str(tiny_openai_clip.hf_dir), "--device", "cpu"]) == 2
    error = capsys.readouterr().err
    assert "need the images of benchmark 'pascal-50s': pass --images" in error and "image_dir" not in error
    assert main(["score", "--metric", "pacscore", "--images", str(EXAMPLES / "images"), "--candidates",
                 str(EXAMPLES / "good_captions.json"), "--model", "capeval/no-such-model", "--device", "cpu"]) == 2
    error = capsys.readouterr().err
    assert "pass --model <local folder>" in error and "model=" not in error
    # a layout the dataset does not have: one line, no traceback
    assert main(["benchmark", "--dataset", "pascal-50s", "--data-root", str(capeval_test_data / "pascal50s"),
                 "--source", "hub", "--metric", "cider"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "source must be 'auto' or 'json', not 'hub'" in error


# 12. warnings, third-party bars, start-up -------------------------------------------------------------------------

def test_truncation_warning_is_one_line_naming_the_items(tiny_openai_clip, tmp_path, capsys) -> None:
    candidates = tmp_path / "long.json"
    candidates.write_text(json.dumps({"image1": "a very long caption about a cat " * 20, "image2": "a dog"}))
    references = tmp_path / "refs.json"
    references.write_text(json.dumps({"image1": ["a cat"], "image2": ["x", "a dog on a rug " * 30]}))
    code = main(score_command(tiny_openai_clip.hf_dir, "--references", str(references), candidates=candidates))
    assert code == 0
    error = capsys.readouterr().err
    warnings = [line for line in error.splitlines() if "warning" in line.lower()]
    assert warnings == ["capeval score: warning: 2 texts exceed the model's 77-token context and were truncated, "
                        "keeping the end token, as the reference implementation does: candidate 'image1', "
                        "reference 1 of 'image2'"]
    assert "UserWarning" not in error and "cli.py" not in error


def test_no_loading_bar_and_download_bars_only_when_verbose(tiny_openai_clip, monkeypatch, capsys) -> None:
    """Loading from disk shows no transformers bar, verbose or not; ``--verbose`` turns huggingface_hub's download
    bars on for the command."""
    from huggingface_hub.utils import are_progress_bars_disabled

    from capeval.commands import score
    from capeval.hub import LoadedModels
    from capeval.models.clip import loading

    run = score.run
    hub_bars = {}

    def recording_run(args):
        hub_bars[args.verbose] = not are_progress_bars_disabled()
        return run(args)

    monkeypatch.setattr(score, "run", recording_run)
    shown = {}
    for verbose in (False, True):
        monkeypatch.setattr(loading, "_LOADED", LoadedModels())  # load the weights again
        assert main((["--verbose"] if verbose else []) + score_command(tiny_openai_clip.hf_dir)) == 0
        shown[verbose] = "Loading weights" in capsys.readouterr().err
    assert shown == {False: False, True: False}
    assert hub_bars == {False: False, True: True}


def test_help_and_version_import_neither_torch_nor_transformers() -> None:
    script = ("import sys, capeval.cli\n"
              "try:\n    capeval.cli.main(['--version'])\nexcept SystemExit:\n    pass\n"
              "print(sorted(name for name in ('torch', 'transformers') if name in sys.modules))")
    for command in ([sys.executable, "-c", script], [sys.executable, "-X", "importtime", "-m", "capeval", "--help"]):
        completed = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, timeout=120,
                                   env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
        assert completed.returncode == 0, completed.stderr[-2000:]
        if "importtime" in command:
            imported = {line.split("|")[-1].strip() for line in completed.stderr.splitlines() if "|" in line}
            assert "usage: capeval" in completed.stdout
            assert not imported & {"torch", "transformers"}
        else:
            assert completed.stdout.splitlines() == ["capeval 0.1.0", "[]"]
    assert capeval.CLIPScore.__name__ == "CLIPScore"  # the lazy public names still resolve


# 13. the multi-process guarantee as documented ------------------------------------------------------------------------

def test_readme_states_the_thread_condition_of_the_multi_process_guarantee() -> None:
    readme = " ".join((REPO_ROOT / "README.md").read_text().split())
    assert "equal bit for bit to a single-process run **with the same number of intra-op threads per process**" \
        in readme
    assert "tests/core/test_engine.py::test_two_processes_equal_one_exactly" in readme
    engine_test = (REPO_ROOT / "tests" / "core" / "test_engine.py").read_text()
    assert "def test_two_processes_equal_one_exactly" in engine_test and '"OMP_NUM_THREADS": "1"' in engine_test


def test_readme_shows_the_offline_error_of_a_missing_default_model(tmp_path, monkeypatch) -> None:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    home = tmp_path / "home"  # capeval's cache at its default place under an empty home, shown as ~ in the README
    monkeypatch.setenv("HOME", str(home))
    for variable in ("HF_HOME", "XDG_CACHE_HOME", "CAPEVAL_CACHE"):
        monkeypatch.delenv(variable, raising=False)
    with pytest.raises(ModelNotAvailableError) as raised:
        CLIPScore(device="cpu")
    shown = str(raised.value).split(" Cause: ")[0].replace(str(home), "~")
    readme = (REPO_ROOT / "README.md").read_text()
    assert f"```text\n{shown}\n```" in readme

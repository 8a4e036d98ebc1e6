"""`quire models pull`, `list` and `quantize`: getting the real weights in one command, seeing what is here, and
writing an int8 or int4 copy that loads without quantizing again.

A pull downloads through huggingface_hub (its progress bars, its cache, HF_HUB_OFFLINE), then checks what it got
without loading any weights (config, every tensor's name and shape from the safetensors headers, tokenizer and
chat template, the layout model's config), so a truncated or wrong download is found here, not at a worker's start.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.config import get_settings

if TYPE_CHECKING:
    from pipeline.engine.model.quantization import Quantization
    from pipeline.engine.verify import Check


def add_model_parsers(commands: argparse._SubParsersAction) -> None:
    models = commands.add_parser("models", help="download the recognition and layout models, or list those here")
    actions = models.add_subparsers(dest="models_command", required=True)
    pull = actions.add_parser(
        "pull", help="download a model and its layout model, then check them without loading the weights",
        description="Downloads into the Hugging Face cache (HF_HOME), or under --dir; with HF_HUB_OFFLINE=1 only "
                    "checks the cached copy. Exit status: 0 all checks pass, 1 a check fails, 2 a model is missing.")
    pull.add_argument("model", nargs="?", default=None, help="hub id or local directory (default: QUIRE_MODEL)")
    pull.add_argument("--layout-model", default=None, help="PP-DocLayout hub id (default: QUIRE_LAYOUT_MODEL)")
    pull.add_argument("--dir", type=Path, default=None, help="download to DIR/NAME instead of the cache")
    listing = actions.add_parser("list", help="models in the Hugging Face cache (or --dir): revision, size, check")
    listing.add_argument("--dir", type=Path, default=None, help="list the checkpoint directories under DIR instead")
    quantize = actions.add_parser(
        "quantize", help="write a copy of a checkpoint with int8 or int4 text-decoder and head weights",
        description="Writes a complete checkpoint directory OUT (config with a quantization_config marker, tokenizer, "
                    "templates, quantized safetensors) that loads without quantizing again and generates exactly "
                    "what quantizing the float checkpoint at load does. The vision tower, projector and embedding "
                    "keep their stored dtype.")
    quantize.add_argument("model", help="hub id or local directory of a float checkpoint")
    quantize.add_argument("out", type=Path, help="directory to write (new or empty)")
    quantize.add_argument("--quantization", choices=["int8", "int4"], required=True)
    quantize.add_argument("--group-size", type=int, default=None,
                          help="int4 input columns per scale: 32, 64 (default) or 128")


def models(args: argparse.Namespace) -> int:
    commands = {"pull": _pull, "list": _list, "quantize": _quantize}
    return commands[args.models_command](args)


def _pull(args: argparse.Namespace) -> int:
    """0 when both models are here and pass every check, 1 when a check fails, 2 when a model is missing."""
    from pipeline.documents.layout_weights import WEIGHT_FILES
    from pipeline.engine.model.loader import CHECKPOINT_FILES

    settings = get_settings()
    wanted = {args.model or settings.model: CHECKPOINT_FILES, args.layout_model or settings.layout_model: WEIGHT_FILES}
    status = 0
    for model, patterns in wanted.items():
        directory = _fetch(model, patterns, args.dir)
        if directory is None:
            status = 2
            continue
        print(f"{model}: {directory} (revision {_revision(directory)})")
        results = check(directory)
        for ok, message in results:
            print(f"  {'ok  ' if ok else 'FAIL'} {message}")
        status = max(status, 0 if all(ok for ok, _ in results) else 1)
    return status


def _fetch(model: str, patterns: list[str], under: Path | None) -> Path | None:
    """The model's directory: a local one as is, else downloaded (or, offline, found in the cache); None after saying
    on stderr why it is not here."""
    from huggingface_hub import constants, snapshot_download

    path = Path(model).expanduser()
    if path.is_dir():
        return path
    if constants.HF_HUB_OFFLINE:
        print(f"HF_HUB_OFFLINE is set: checking the cached copy of {model} only", file=sys.stderr)
    local_dir = under / model.rsplit("/", 1)[-1] if under else None
    try:
        return Path(snapshot_download(model, allow_patterns=patterns, local_dir=local_dir))
    except Exception as exc:  # offline and not cached, unknown repo, gated, no network: all mean "not here"
        where = local_dir or constants.HF_HUB_CACHE
        if constants.HF_HUB_OFFLINE:
            print(f"error: {model} is not in {where} and HF_HUB_OFFLINE is set: run `quire models pull` where the "
                  "hub can be reached (unset HF_HUB_OFFLINE), or copy the cache here", file=sys.stderr)
        else:
            print(f"error: {model} could not be fetched from the hub ({exc})", file=sys.stderr)
        return None


def check(directory: Path) -> list[tuple[bool, str]]:
    """(passed, what was checked or why it failed) per check, by the kind of model config.json names."""
    checks = _checks_for(directory)
    if checks is None:
        return [(False, f"{directory / 'config.json'}: not a PaddleOCR-VL or PP-DocLayout checkpoint")]
    results = []
    for name, run in checks:
        try:
            results.append((True, run(directory)))
        except Exception as exc:  # any failure is the verdict on this checkpoint, not a crash of the command
            results.append((False, f"{name}: {exc}"))
    return results


def _checks_for(directory: Path) -> list[Check] | None:
    try:
        model_type = json.loads((directory / "config.json").read_text()).get("model_type")
    except (OSError, ValueError, AttributeError):
        model_type = None
    if model_type == "paddleocr_vl":
        from pipeline.engine.verify import CHECKS

        return CHECKS
    if model_type in ("pp_doclayout_v2", "pp_doclayout_v3"):
        return [("layout config", _check_layout_config)]
    return None


def _check_layout_config(directory: Path) -> str:
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(directory)
    weights = sorted(path.name for path in directory.glob("*.safetensors"))
    if not weights:
        raise FileNotFoundError(f"{directory}: no safetensors weights")
    return f"config.json parses ({config.model_type}, {config.num_labels} classes; {', '.join(weights)})"


def _revision(directory: Path) -> str:
    """The hub commit of a cache snapshot or of a `--dir` download, else `local`."""
    from huggingface_hub._local_folder import read_download_metadata

    from pipeline.engine.model.revision import hub_commit

    commit = hub_commit(directory)
    # read_download_metadata creates a lock file: only asked when a download left its metadata there
    if commit is None and (directory / ".cache" / "huggingface" / "download" / "config.json.metadata").is_file():
        metadata = read_download_metadata(directory, "config.json")
        commit = metadata.commit_hash if metadata else None
    return commit or "local"


def _list(args: argparse.Namespace) -> int:
    """0, the models listed (none is no error); 2 when --dir names no directory."""
    if args.dir and not args.dir.is_dir():
        print(f"error: {args.dir}: no such directory", file=sys.stderr)
        return 2
    rows = _directory_rows(args.dir) if args.dir else _cache_rows() + _tiny_rows()
    if not rows:
        settings = get_settings()
        print(f"no models in {args.dir or _cache_dir()}: `quire models pull` fetches {settings.model} and "
              f"{settings.layout_model}, `quire demo` writes a tiny random checkpoint", file=sys.stderr)
    for name, revision, size, directory in rows:
        results = check(directory)
        verdict = "ok" if all(ok for ok, _ in results) else next(message for ok, message in results if not ok)
        print(f"{name:48} {revision[:12]:12} {size / 1e9:7.2f} GB  {verdict}")
    return 0


def _cache_rows() -> list[tuple[str, str, int, Path]]:
    from huggingface_hub import CacheNotFound, scan_cache_dir

    try:
        cache = scan_cache_dir()
    except CacheNotFound:
        return []
    return [(repo.repo_id, revision.commit_hash, revision.size_on_disk, revision.snapshot_path)
            for repo in sorted(cache.repos, key=lambda repo: repo.repo_id) if repo.repo_type == "model"
            for revision in sorted(repo.revisions, key=lambda revision: revision.last_modified)]


def _directory_rows(under: Path) -> list[tuple[str, str, int, Path]]:
    return [_directory_row(path.name, path) for path in sorted(under.iterdir()) if (path / "config.json").is_file()]


def _tiny_rows() -> list[tuple[str, str, int, Path]]:
    """The demo's tiny checkpoint, named by its path (what `--model` takes), when `quire demo` has written it."""
    tiny = get_settings().tiny_checkpoint
    return [_directory_row(str(tiny), tiny)] if (tiny / "config.json").is_file() else []


def _directory_row(name: str, path: Path) -> tuple[str, str, int, Path]:
    return name, _revision(path), sum(file.stat().st_size for file in path.rglob("*") if file.is_file()), path


def _cache_dir() -> str:
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE


def _quantize(args: argparse.Namespace) -> int:
    """0 with the directory written, 1 (nothing written) when the scheme or the checkpoint is refused."""
    from pipeline.engine.model.loader import resolve_checkpoint
    from pipeline.engine.model.quantization import Quantization

    try:
        scheme = Quantization.parse(args.quantization, args.group_size)
        source = resolve_checkpoint(args.model)
        write_quantized(source, args.out, scheme)
    except ValueError as exc:  # CheckpointError is one: a bad group size, a missing or already quantized checkpoint
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{args.out}: {scheme} copy of {source}")
    return 0


def write_quantized(source: Path, out: Path, scheme: Quantization) -> None:
    """Every file of `source` but its weights, config.json marked, and the weights quantized into one safetensors
    file; all tensors are made before OUT is touched, so a refused checkpoint leaves nothing behind."""
    from safetensors.torch import save_file

    from pipeline.engine.model.loader import quantized_tensors

    if out.exists() and any(out.iterdir()):
        raise ValueError(f"{out}: exists and is not empty; name a new directory")
    tensors = dict(quantized_tensors(source, scheme))
    out.mkdir(parents=True, exist_ok=True)
    for file in source.iterdir():
        if file.is_file() and file.suffix != ".safetensors" and file.name != "model.safetensors.index.json":
            shutil.copyfile(file, out / file.name)
    config = json.loads((source / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "quantization_config": scheme.marker()}, indent=2))
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})

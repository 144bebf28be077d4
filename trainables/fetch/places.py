"""Where things are: ``$MMEMB_DATA``, the Hugging Face cache, the hub (``$HF_ENDPOINT``, the
way to fetch through a mirror) and an item's repository in each."""

from __future__ import annotations

import os
from pathlib import Path

from trainables.config import data_folder
from trainables.fetch.catalog import Item

ENDPOINT = "https://huggingface.co"


def data_root(given: str | None = None) -> Path:
    """``--data``, else ``$MMEMB_DATA``, else ``./data``; a link loop is one line (ValueError)."""
    return data_folder.data_root(given, "--data" if given else "MMEMB_DATA")


def hub_cache() -> Path:
    """The Hugging Face cache transformers reads (``$HF_HUB_CACHE``, ``$HF_HOME/hub``, ...)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser().absolute()
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE).expanduser().absolute()


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or ENDPOINT).rstrip("/")


def cache_repo(item: Item) -> Path:
    return hub_cache() / f"{item.repo_type}s--{item.cache_name.replace('/', '--')}"


def repo_url(item: Item) -> str:
    return f"{endpoint()}/{'datasets/' if item.repo_type == 'dataset' else ''}{item.repo}"


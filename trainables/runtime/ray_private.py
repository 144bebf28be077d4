"""Ray's private modules (and its ``experimental`` key-value store), imported here and nowhere
else: a Ray upgrade that moves one fails in tests/trainables/runtime/test_private_apis.py by name. A leaf module (it imports nothing of the
project), so ``ray_env``, ``ray_address`` and ``shipping`` can all read it without a cycle."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ray._private import state as state  # noqa: F401  placement groups, actors without a dashboard
from ray._private import worker as worker  # noqa: F401  the driver's printer, the node's log dir


def address_from_environment(address: str) -> str | None:
    """The address ``ray.init(address)`` would join (``$RAY_ADDRESS`` first, ``auto`` read from
    the cluster recorded here), by Ray's own lookup."""
    from ray._private.services import get_ray_address_from_environment

    return get_ray_address_from_environment(address, None)


def walk_shipped(folder: Path, excludes: list[str], take: Callable[[Path], None],
                 include_gitignore: bool) -> None:
    """Call ``take`` on each path Ray's runtime environment would upload of ``folder``, by Ray's
    own walk and ignore rules (so the check and the upload cannot disagree)."""
    from ray._private.runtime_env.packaging import _dir_travel, _get_excludes

    _dir_travel(folder, [_get_excludes(folder, excludes)], take,
                include_gitignore=include_gitignore)


# The GCS's key-value store (``orchestrator/run/report_channel.py``: a trial's reports), in one
# namespace of the project's own.
_KV_NAMESPACE = "mmemb"


def kv_put_new(key: bytes, value: bytes) -> bool:
    """Store ``value`` at ``key`` unless the key is taken; returns whether it was taken."""
    from ray.experimental.internal_kv import _internal_kv_put

    return bool(_internal_kv_put(key, value, overwrite=False, namespace=_KV_NAMESPACE))


def kv_get(key: bytes) -> bytes | None:
    from ray.experimental.internal_kv import _internal_kv_get

    return _internal_kv_get(key, namespace=_KV_NAMESPACE)


def kv_delete_prefix(prefix: bytes) -> None:
    from ray.experimental.internal_kv import _internal_kv_del

    _internal_kv_del(prefix, del_by_prefix=True, namespace=_KV_NAMESPACE)

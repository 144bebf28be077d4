"""After the backward, before any weight changes: which members leave the array, and why.

A member leaves when its heads or loss raised this step, when one of its loss terms is NaN or
infinite, or when its method's threshold filter masked every negative of ``FULLY_MASKED_STOP``
caption batches in a row (its grounding terms would silently be 0). Every term of every member is
read back to the host in one transfer, so the check costs one synchronisation a step, not one a
member; a multi-worker array first all-reduces the members' flags, so that every worker drops the
same members.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from trainables.arrays.device_constants import DeviceConstants
from trainables.arrays.members import Member

FULLY_MASKED_STOP = 3
"""caption batches in a row whose every negative the method's false-negative filter masked before
the member is stopped: its grounding terms are then exactly 0, so it would silently train without
them"""


class FiniteCheck:
    """The check of one array (``world``: its workers)."""

    def __init__(self, world: int = 1):
        self.world = world
        self._constants = DeviceConstants()
        """term -> member index vectors, made once per layout of the members' terms"""

    def members_to_drop(self, alive: Sequence[Member], all_terms: list[dict[str, torch.Tensor]],
                        masked: dict[int, torch.Tensor], errors: dict[int, str],
                        step: int) -> dict[int, str]:
        """Members to drop -> why: a step that raised in the member's heads or loss, a NaN/inf
        loss term, or a threshold filter that masked every negative for FULLY_MASKED_STOP
        caption batches in a row (``errors``: the members whose heads or loss raised, and why).
        One host sync for the array."""
        names = [list(t) for t in all_terms]
        back = self.read_back(all_terms, masked)
        return self.reasons(back.tolist(), alive, names, sorted(masked), errors, step)

    def read_back(self, all_terms: list[dict[str, torch.Tensor]],
                  masked: dict[int, torch.Tensor]) -> torch.Tensor:
        """The device half of the check: one vector of the members' flags (1: a non-finite term),
        the filter shares (members in index order) and every term's value (members in order,
        each member's terms in its dict's order), for ``reasons`` to read in one transfer."""
        names = [list(t) for t in all_terms]
        flat = torch.stack([t[k].detach().float() for t, ks in zip(all_terms, names, strict=True) for k in ks]
                           + [masked[j].detach().float() for j in sorted(masked)])
        ok = torch.isfinite(flat)
        n = flat.numel() - len(masked)
        # each member's count of non-finite terms in one scatter (a fixed number of kernels, not
        # two a member): owner[i] is the member of term i
        owner = self._constants([j for j, ks in enumerate(names) for _ in ks], torch.long,
                                flat.device)
        member_bad = (flat.new_zeros(len(names)).index_add_(0, owner, (~ok[:n]).float()) > 0).float()
        shares = flat[n:]
        if self.world > 1:
            # Every worker drops the same members: a member is bad when it is bad on any worker,
            # and the filter's stop rule reads the fraction masked over all workers' rows (each
            # worker sees its own shard of the batch). One all-reduce of a vector whose length is
            # the same on every worker (a member's terms may differ where its step raised).
            import torch.distributed as dist

            both = torch.cat([member_bad, torch.nan_to_num(shares.float(), nan=0.0)])
            dist.all_reduce(both)
            member_bad, shares = both[: len(names)], both[len(names):] / self.world
        # one read-back for the array: the members' flags, the filter shares and every value
        return torch.cat([member_bad.float(), shares.float(), flat[:n]])

    def reasons(self, back: list[float], alive: Sequence[Member], names: list[list[str]],
                masked: list[int], errors: dict[int, str], step: int) -> dict[int, str]:
        """The host half: ``back`` (``read_back``'s vector, read to the host) -> the members to
        drop and why; advances each filtered member's run of fully masked caption batches.
        ``names``: each member's term names in order; ``masked``: the members (index among the
        alive, ascending) whose filter share is in ``back``."""
        bounds = [0]
        for ks in names:
            bounds.append(bounds[-1] + len(ks))
        bad_list, share_list = back[: len(names)], back[len(names): len(names) + len(masked)]
        vals = back[len(names) + len(masked):]
        ok_list = [math.isfinite(v) for v in vals]
        out: dict[int, str] = {}
        for j, ks in enumerate(names):
            if not bad_list[j]:
                continue
            m, pos = alive[j], bounds[j]
            flags = ok_list[pos : pos + len(ks)]
            if j in errors:
                out[j] = errors[j]
            elif all(flags):  # bad on another worker only
                out[j] = (f"failed at step {step} on another worker of the array (config "
                          f"{m.record.config_hash}); its reason is in that worker's log")
            else:
                bad = [k for k, good in zip(ks, flags, strict=True) if not good]
                culprit = next((k for k in bad if k != "total"), "total")
                value = vals[pos + ks.index(culprit)]
                out[j] = (f"non-finite loss at step {step}: term {culprit!r} is {value} (config "
                          f"{m.record.config_hash}); lower lr, check the features for NaN/inf, or use "
                          "precision=fp32")
        for j, frac in zip(masked, share_list, strict=True):
            r, f = alive[j].record, alive[j].filter
            if f is None or j in errors:
                continue
            r.masked.append(frac)
            r.fully_masked_run = r.fully_masked_run + 1 if frac >= 1.0 else 0
            if r.fully_masked_run >= FULLY_MASKED_STOP and j not in out:
                out[j] = (f"the threshold filter masked every negative in {FULLY_MASKED_STOP} caption "
                          f"batches in a row (threshold {f.threshold} on {f.on} scores of the "
                          "stored features), so both grounding terms are exactly 0 (config "
                          f"{r.config_hash}); use {f.on_setting}=cosine, a higher threshold, "
                          f"or {f.setting}=none")
        return out

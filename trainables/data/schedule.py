"""Which batch (text or caption-image pair) each optimiser step sees: the official alternation.

``mode="official"`` is ``train_mix.py`` exactly (docs/official-code.md §2.2)::

    text_batches = ceil(|wiki| / bs); pair_batches = ceil(|pairs| / bs)
    paired_sample_step = text_batches // pair_batches
    steps_per_epoch = text_batches + pair_batches
    for epoch: for step in range(steps_per_epoch):        # step restarts every epoch
        pair batch if step % paired_sample_step == 0 else text batch

so an epoch holds ceil(steps_per_epoch / paired_sample_step) pair batches (not pair_batches)
and is not an exact pass over either loader.

``mode="proportional"`` is the MCSE paper's wording ("batches sampled in proportion to their
sizes"), defined here as a deterministic Bresenham interleave over the same
N = text_batches + pair_batches steps: step s is a pair step iff ``(s * P) % N < P``
(P = pair_batches). That gives exactly P pair and T text steps per epoch, spread as evenly as
integers allow, step 0 a pair step (as official); so each epoch is exactly one pass over both
loaders, and it also works when P > T (where official raises).

Text-only (``n_pair=0``, SimCSE) and pair-only (``n_text=0``, MCSE ``train.py``) have one loader;
an epoch is then one pass over it.

Loaders are as ``inf_train_gen(DataLoader(shuffle=True, drop_last=False))``: a fresh permutation
per pass, the last batch of a pass short, and the stream carries over between epochs. Each has
its own RNG (``SeedSequence([seed, 0|1])``) so the text order does not depend on the pair data.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

MODES = ("official", "proportional")


class ScheduleError(ValueError):
    """The two data sizes and the batch size cannot make the requested schedule."""


@dataclass(frozen=True)
class Step:
    epoch: int
    step: int
    """position inside the epoch (restarts at 0, as the official ``step``)"""
    global_step: int
    kind: str
    """"text" | "pair" """
    indices: np.ndarray
    """rows of the text corpus (text) or of the feature store (pair)"""


@dataclass(frozen=True)
class ScheduleCounts:
    text_batches: int
    pair_batches: int
    paired_sample_step: int
    """official: text_batches // pair_batches; proportional/one loader: 0 (unused)"""
    steps_per_epoch: int
    pair_steps_per_epoch: int
    total_steps: int


def count_steps(
    n_text: int, n_pair: int, batch_size: int, epochs: int = 1, mode: str = "official"
) -> ScheduleCounts:
    """The schedule's sizes from the data sizes alone (nothing is materialised)."""
    for name, v in (("n_text", n_text), ("n_pair", n_pair)):
        if v < 0:
            raise ScheduleError(f"{name}={v}: a data size cannot be negative")
    if n_text == 0 and n_pair == 0:
        raise ScheduleError("n_text=0 and n_pair=0: no training data")
    if batch_size < 1 or epochs < 1:
        raise ScheduleError(f"batch_size={batch_size}, epochs={epochs}: both must be >= 1")
    if mode not in MODES:
        raise ScheduleError(f"mode={mode!r}: use one of {MODES}")
    t, p = math.ceil(n_text / batch_size), math.ceil(n_pair / batch_size)
    pss = 0
    if t and p:
        spe = t + p
        if mode == "official":
            pss = t // p
            if pss == 0:
                raise ScheduleError(
                    f"{p} pair batches > {t} text batches: the official schedule divides by "
                    f"text_batches // pair_batches = 0; set schedule=proportional or use more text data"
                )
            pair_steps = math.ceil(spe / pss)  # steps 0, pss, 2*pss, ... below spe
        else:
            pair_steps = p
    else:
        spe, pair_steps = t + p, p
    return ScheduleCounts(t, p, pss, spe, pair_steps, spe * epochs)


def run_length(counts: ScheduleCounts, max_steps: int | None) -> tuple[int, int]:
    """(steps, epochs) of a run, as the official ``--max_train_steps``: None trains the config's
    epochs; a step budget replaces them, ``ceil(max_steps / steps_per_epoch)`` epochs (more than
    the config's when it is larger, the last one cut short) and the learning rate decays to 0
    over ``max_steps``."""
    if max_steps is None:
        return counts.total_steps, counts.total_steps // counts.steps_per_epoch
    return max_steps, math.ceil(max_steps / counts.steps_per_epoch)


def _is_pair(step: int, c: ScheduleCounts, mode: str) -> bool:
    if c.pair_batches == 0:
        return False
    if c.text_batches == 0:
        return True
    if mode == "official":
        return step % c.paired_sample_step == 0
    return (step * c.pair_batches) % c.steps_per_epoch < c.pair_batches


class _Loader:
    """Infinite reshuffling batch stream over range(n); state = RNG before this pass + position."""

    def __init__(self, n: int, batch_size: int, seed: int, stream: int):
        self.n, self.bs = n, batch_size
        self.rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, stream])))
        self._new_pass()

    def _new_pass(self) -> None:
        self.pass_state = self.rng.bit_generator.state
        self.perm = self.rng.permutation(self.n)
        self.pos = 0

    def next(self) -> np.ndarray:
        if self.pos >= self.n:
            self._new_pass()
        out = self.perm[self.pos : self.pos + self.bs]
        self.pos += len(out)
        return out

    def state_dict(self) -> dict:
        return {"pass_state": self.pass_state, "pos": self.pos}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["pass_state"]
        self._new_pass()  # re-draws the same permutation from the saved RNG state
        self.pos = int(state["pos"])


class BatchSchedule:
    """Iterate :class:`Step`s; resumable mid-epoch via ``state_dict`` / ``load_state_dict``."""

    def __init__(
        self,
        n_text: int,
        n_pair: int,
        batch_size: int,
        epochs: int = 1,
        seed: int = 0,
        mode: str = "official",
        max_steps: int | None = None,
    ):
        self.counts = count_steps(n_text, n_pair, batch_size, epochs, mode)
        if max_steps is not None and max_steps < 1:
            raise ScheduleError(f"max_steps={max_steps}: must be >= 1 (or None for all epochs)")
        self.n_text, self.n_pair, self.batch_size = n_text, n_pair, batch_size
        self.epochs, self.seed, self.mode = epochs, seed, mode
        # As the official ``max_train_steps``: a step budget overrides the epoch count.
        self.total_steps = self.counts.total_steps if max_steps is None else max_steps
        self._text = _Loader(n_text, batch_size, seed, 0) if n_text else None
        self._pair = _Loader(n_pair, batch_size, seed, 1) if n_pair else None
        self.global_step = 0

    @property
    def steps_per_epoch(self) -> int:
        return self.counts.steps_per_epoch

    def kind_at(self, step: int) -> str:
        """"pair" or "text" for in-epoch position ``step`` (no indices drawn)."""
        return "pair" if _is_pair(step, self.counts, self.mode) else "text"

    def __iter__(self) -> Iterator[Step]:
        return self

    def __next__(self) -> Step:
        g = self.global_step
        if g >= self.total_steps:
            raise StopIteration
        epoch, step = divmod(g, self.counts.steps_per_epoch)
        kind = self.kind_at(step)
        loader = self._pair if kind == "pair" else self._text
        self.global_step = g + 1
        return Step(epoch, step, g, kind, loader.next())

    def __len__(self) -> int:
        return self.total_steps - self.global_step

    def state_dict(self) -> dict:
        """Position and RNG states (JSON-able, a few hundred bytes: no permutation is stored)."""
        return {
            "config": [self.n_text, self.n_pair, self.batch_size, self.seed, self.mode],
            "global_step": self.global_step,
            "text": self._text.state_dict() if self._text else None,
            "pair": self._pair.state_dict() if self._pair else None,
        }

    def load_state_dict(self, state: dict) -> None:
        mine = [self.n_text, self.n_pair, self.batch_size, self.seed, self.mode]
        if list(state["config"]) != mine:
            raise ScheduleError(
                f"schedule state was saved for (n_text, n_pair, batch_size, seed, mode)="
                f"{list(state['config'])}, this schedule is {mine}; resume with the same data and config"
            )
        self.global_step = int(state["global_step"])
        if self._text:
            self._text.load_state_dict(state["text"])
        if self._pair:
            self._pair.load_state_dict(state["pair"])

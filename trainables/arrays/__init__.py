"""Trial arrays: M members (one (config, seed) each) sharing an encoder architecture, trained in
one process as one vectorised model, each member's outputs depending only on its own parameters,
inputs and dropout stream (member independence)."""

from trainables.arrays.encoder import StackedEncoder

__all__ = ["StackedEncoder"]

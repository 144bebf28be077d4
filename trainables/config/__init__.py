"""What a run is: the frozen, hashable run config (``run_config``) and the profiles and recipes
that build it (``profiles``). May import: runtime, evaluation, objectives, models."""

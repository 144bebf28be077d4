"""What a campaign runs: grids (tables, figures), search spaces, where they are found, their
checks, and the typed plan of runs packed into arrays.

May import: ``trainables`` (configs and profiles) and Optuna; no Ray, MLflow or other orchestrator package.
"""

"""Statistics, paper-shaped tables, plots and the calibration's numbers: pure NumPy/SciPy.

May import: nothing of orchestrator but itself, and no torch, Ray, MLflow or Optuna.
"""

"""What a finished campaign gives its user: the report, the search report, the calibration
report, the best student, and the views and checks of the MLflow UI.

May import: ``orchestrator.analysis``, ``orchestrator.spec``, ``orchestrator.tracking``; not Ray.
"""

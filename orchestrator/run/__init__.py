"""Running a campaign on Ray: options, resources, pre-start checks, the session (Ray, MLflow
parent, Tune), one Tune trial per array, the live view, placement cleanup, a search's rounds.

May import: every other orchestrator package (``analysis``, ``spec``, ``tracking``, ``results``).
"""

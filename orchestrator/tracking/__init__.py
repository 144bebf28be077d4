"""MLflow bookkeeping: the tracking client, git provenance, the offline journal, and the Tune
callback that mirrors every run into MLflow.

May import: ``orchestrator.spec`` (plan types), MLflow and Ray Tune's callback API.
"""

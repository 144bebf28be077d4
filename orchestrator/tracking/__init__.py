"""MLflow bookkeeping: the tracking client, git provenance, the offline journal, and the Tune
callback that mirrors every run into MLflow.

The store is checked before it is opened, one module an idea: ``uris`` (the URI forms, a password
masked), ``store_checks`` (scheme, folder, file, driver, database), ``store_lock`` (a sqlite store
another process holds), ``server`` (an ``http(s)://`` server answers), ``wording`` (where a
refusal says to put the store instead); ``client`` is the run layout on top of them.

May import: ``orchestrator.spec`` (plan types), MLflow and Ray Tune's callback API.
"""

"""mmemb's orchestration: the command lines at the top, one package per concept below them.

Commands (``python -m orchestrator.X``): ablate, search, calibrate, report, best, sync,
ui_links, ui_check, ray_start and ray_stop (what a cluster's start commands launch, and stopping
exactly that); ``cli`` holds their shared arguments and error discipline. Packages, each
importing only those listed before it: ``analysis`` (statistics, tables, plots), ``spec`` (grids,
searches, the typed plan), ``tracking`` (MLflow), ``results`` (reports, UI views), ``run`` (Ray).
Words: docs/glossary.md.
"""

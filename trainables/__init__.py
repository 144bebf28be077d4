"""mmemb's training side: the commands at the top, one package per concept below them.

Commands (``python -m trainables.X``): train (one run; the Ray Train workers' entry), fetch (the
paper profile's data onto a fresh machine), convert and extract (feature stores); ``testing``
holds tiny models and data for tests and benchmarks.
Packages, each importing only those listed before it: ``runtime`` (setting checks, command-line
options, the Ray driver, locks, fault injection), ``evaluation`` (STS and transfer tasks),
``objectives`` (the method API and the methods' losses), ``models`` (student, heads, pretrained
encoders, teachers, MLflow export), ``config`` (run config, profiles), ``data`` (corpus, store,
schedule, batches, demo world), ``arrays`` (many runs trained as one). ``tests/test_layers.py``
holds the order. Never imports ``orchestrator``. Words: docs/glossary.md; the flow of a table
through them: docs/architecture.md.
"""

"""Orchestration: library functions that drive servers and load, and return data.

- ``observe``   one load run with ``/metrics`` scraped, its decomposition and its findings
- ``sweep``     the load grown step by step (``analysis.sweep`` decides; this runs the steps)
- ``experiment`` A/B runs that prove (or refute) a fix
- ``diagnose``  the whole chain, from "it is slow" to a ranked, evidenced answer

The CLI calls these and prints what they return; nothing here prints except through the
``progress`` callbacks the caller passes.
"""

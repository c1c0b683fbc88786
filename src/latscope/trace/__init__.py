"""latscope.trace: GPU profiler traces turned into answers.

``readers`` turn Kineto JSON, rocprofv3 JSON/CSV and nsys SQLite into one columnar event model
(``model``); ``analysis`` computes per-device windows, union-based breakdowns, kernel tables,
copies and idle gaps; ``analyze.analyze_trace`` runs them all, ``findings`` turns the result into
``Finding``s and ``compare`` diffs two results. Kernel-name rules live in ``taxonomy.toml``.
"""

"""Stands in for ``rfc3987-syntax`` in the test session (tests/conftest.py puts this folder first
on the path): importing it raises ImportError, which jsonschema treats as the optional package
being absent.

Where Jupyter is installed, ``jsonschema[format-nongpl]`` brings the real one, and its import
builds ~40 Earley parsers (2.4 s here). Every vLLM process imports it (vLLM imports Ray where it
is installed, Ray imports jsonschema), so a vLLM start of the tiny model took 41.7-46.5 s on a
2-core box with it and 29.1-37.9 s without it (four starts each, alternated); the suite starts
about fifteen. It cost the Ray tests more: the raylet's fixed 15 s wait for its agent ran out.
Neither vLLM nor Ray nor latscope validates the ``iri`` formats it serves.
"""

raise ImportError("rfc3987_syntax is hidden in latscope's test session (tests/shims)")

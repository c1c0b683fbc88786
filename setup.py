"""The optional C part of latscope (src/latscope/_native.c): one pass over a finished streamed
response and a request's ITL gaps. Everything else is in pyproject.toml.

``optional=True``: where no C compiler is found, the build goes on without it and latscope reads
streams with its pure-Python fast reader (the same answers, 3.5-4x the client's CPU per streamed
token at full speed, docs/bench.md; ``summary.json`` says which ran in ``client.stream_parser``)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("latscope._native", ["src/latscope/_native.c"],
                             extra_compile_args=["-O2"], optional=True)])

"""The optional C part of latscope: one pass over a finished streamed response
(src/latscope/_native.c). Everything else is in pyproject.toml.

``optional=True``: where no C compiler is found, the build goes on without it and latscope reads
streams with its pure-Python fast reader (the same answers, ~0.7 us more CPU per streamed token;
``summary.json`` says which ran in ``client.stream_parser``)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("latscope._native", ["src/latscope/_native.c"],
                             extra_compile_args=["-O2"], optional=True)])

"""latscope: find out why an LLM inference server is slow, layer by layer."""

__version__ = "0.1.0"

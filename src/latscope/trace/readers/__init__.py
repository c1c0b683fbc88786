"""latscope.trace.readers."""

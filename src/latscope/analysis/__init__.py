"""latscope.analysis."""

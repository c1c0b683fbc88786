"""latscope.load."""

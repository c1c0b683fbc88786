"""latscope.trace."""

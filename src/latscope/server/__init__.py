"""latscope.server."""

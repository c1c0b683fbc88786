"""latscope.env."""

"""The thin command line: one module per verb; each parses flags, calls the library, prints."""

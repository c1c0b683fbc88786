"""Static files of the HTML report (template and CSS), read with importlib.resources."""

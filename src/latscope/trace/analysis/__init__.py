"""Analyses over one ``TraceEvents``, per device: window, breakdown, kernels, copies, gaps."""

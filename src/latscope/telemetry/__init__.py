"""GPU telemetry in step with a load run (docs/telemetry.md).

- ``nvml``     raw NVML readings, every call guarded (stdlib only: the recording script loads it)
- ``amd``      AMD readings: the ``amdsmi`` library, ``amd-smi`` / ``rocm-smi`` JSON
- ``sample``   one ``GpuSample`` form for every vendor
- ``sources``  which reader answers on this host, or the one line saying why none does
- ``sampler``  ``TelemetrySampler``, the run observer beside the ``/metrics`` scraper
- ``holders``  which GPUs the server's processes hold, and who else is on them
- ``facts``    the samples joined with the run's scrapes: what the rules and reports read

The rules are in ``latscope.findings.telemetry``.
"""

"""latscope.fleet: several replicas of one service, read through the Prometheus server that
already scrapes them (``prometheus``, ``window``) or scraped directly during a load run through
their balancer (``replicas``), and turned into typed facts per replica (``facts``) for the
fleet's rules (``latscope.findings.fleet``)."""

"""``latscope gateway``: an OpenAI-compatible reverse proxy with its own short-first queue and
adaptive admission in front of a server, or (``policy="tag"``) one that holds nothing and tags
each request's vLLM ``priority`` with its short-first deadline (docs/gateway.md).

Library surface::

    from latscope.gateway import running_gateway, gateway_fits
    with running_gateway("http://127.0.0.1:8000", policy="sjf", max_inflight=None) as url:
        ...  # send load to url
    fit = gateway_fits(queue_share=0.7, sizes=[192] * 90 + [2304] * 10)
    fit.propose, fit.reason
"""

from __future__ import annotations

from latscope.gateway.config import GatewayConfig
from latscope.gateway.fits import GatewayFit, gateway_fits
from latscope.gateway.proxy import Gateway
from latscope.gateway.run import running_gateway, serve

__all__ = ["Gateway", "GatewayConfig", "GatewayFit", "gateway_fits", "running_gateway", "serve"]

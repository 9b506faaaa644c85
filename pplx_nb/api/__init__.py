"""Talking to Perplexity over httpx2: both protocols, retries, the rate limit, a response cache.

Knows nothing about conversations or the store; the Researcher builds :class:`Request` objects and
hands the :class:`~pplx_nb._models.Answer` on. This layer alone decides where requests go
(:func:`resolve_endpoint`): offline, it starts the built-in simulator in-process.
"""

from __future__ import annotations

from pplx_nb.api._activity import Activity
from pplx_nb.api._failures import submission_unknown
from pplx_nb.api._throttle import RateLimitHeaders
from pplx_nb.api.cache import CacheStats, ResponseCache
from pplx_nb.api.client import AsyncClient, Client
from pplx_nb.api.endpoint import Endpoint, resolve_endpoint
from pplx_nb.api.request import Request
from pplx_nb.api.retry import RetryPolicy

__all__ = [
    "Activity",
    "AsyncClient",
    "CacheStats",
    "Client",
    "Endpoint",
    "RateLimitHeaders",
    "Request",
    "ResponseCache",
    "RetryPolicy",
    "resolve_endpoint",
    "submission_unknown",
]

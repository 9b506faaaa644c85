"""Search API results seen from the façade: ranked pages, no answer, a conversation only if asked.

Saved results become a conversation whose one exchange is the query and an assistant turn listing
the results (with them as its sources), so a follow-up can ask about them as about any answer.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from pplx_nb._errors import ValidationError
from pplx_nb._metrics import Metrics
from pplx_nb._models import Cost, Message, now_iso
from pplx_nb._options import WebSearchFilters
from pplx_nb._web_results import SEARCH_PRICE_USD, WebResults
from pplx_nb.research._clients import ClientPool
from pplx_nb.research._turns import SYSTEM_PROMPT, check_query

if TYPE_CHECKING:
    from pplx_nb.store import ConversationStore

__all__ = ["WEB_SEARCH_TOOL", "WebSearcher", "results_message"]

WEB_SEARCH_TOOL = "perplexity_web_search"
"""The ``tool`` of a saved results turn (the MCP tool's name)."""


class WebSearcher:
    """Runs Search API queries for a Researcher; stores them only when asked.

    Args:
        store: where saved results go.
        clients: the client of the running loop.
        metrics: counts each request and its price.
    """

    def __init__(self, store: ConversationStore, clients: ClientPool, metrics: Metrics) -> None:
        self._store = store
        self._clients = clients
        self._metrics = metrics

    async def search(
        self, query: str | list[str], max_results: int, save: bool, filters: WebSearchFilters
    ) -> WebResults:
        """The results for ``query`` (or a list of queries); with ``save``, stored as a new
        conversation first."""
        started = time.perf_counter()
        try:
            query = _checked(query)
            if save:
                self._store.check_writable()
            results = await self._clients.current().web_search(
                query, max_results=max_results, **filters
            )
        except Exception:
            self._metrics.record(time.perf_counter() - started, ok=False)
            raise
        self._metrics.record(
            time.perf_counter() - started, ok=True, api_calls=1, cost=SEARCH_PRICE_USD
        )
        if save:
            conversation = self._store.create(
                [
                    Message(role="system", content=SYSTEM_PROMPT, timestamp=now_iso()),
                    Message(role="user", content=results.query, timestamp=now_iso()),
                    results_message(results),
                ]
            )
            results.conversation_id = conversation.conversation_id
        return results


def _checked(query: object) -> str | list[str]:
    """The query, or each query of a list, as :func:`check_query` passes it."""
    if not isinstance(query, list | tuple):
        return check_query(query, attach=False)[0]
    from pplx_nb.api.search import MAX_QUERIES

    if not query:
        raise ValidationError(f"The list of queries is empty: give 1 to {MAX_QUERIES} of them.")
    if len(query) > MAX_QUERIES:
        raise ValidationError(
            f"The list holds {len(query)} queries; one request searches at most {MAX_QUERIES}. "
            "Search the others in another call."
        )
    checked = []
    for number, each in enumerate(query, 1):
        if not isinstance(each, str) or not each.strip():
            raise ValidationError(
                f"Query {number} of the list is {each!r}: give each query in words."
            )
        checked.append(check_query(each, attach=False)[0])
    return checked


def results_message(results: WebResults) -> Message:
    """The assistant turn that holds saved results: a numbered list, the results as sources,
    and the request's price (estimated: the Search API reports none)."""
    if results:
        intro = f"Web search results for “{results.query}” (no answer was generated):"
        content = f"{intro}\n\n{results.to_list()}"
    else:
        content = f"The web search for “{results.query}” found no results."
    price = Cost(request_cost=SEARCH_PRICE_USD, total_cost=SEARCH_PRICE_USD, estimated=True)
    return Message(
        role="assistant",
        content=content,
        timestamp=now_iso(),
        tool=WEB_SEARCH_TOOL,
        sources=list(results),
        cost=price,
    )

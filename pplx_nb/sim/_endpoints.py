"""Every endpoint of the simulator in one object: both protocols, the Search API, the models."""

from __future__ import annotations

from datetime import UTC, datetime

from pplx_nb.sim._agent_api import AgentHandlers
from pplx_nb.sim._catalog import SEARCH_API_PRICE, model_list
from pplx_nb.sim._faults import Fault
from pplx_nb.sim._http import Reply, Request, json_reply
from pplx_nb.sim._search import parse_search, search_response
from pplx_nb.sim._sonar import SONAR_MODELS
from pplx_nb.sim._sonar_api import SonarHandlers
from pplx_nb.sim._validate import parse_json_object

__all__ = ["Endpoints"]


class Endpoints(AgentHandlers, SonarHandlers):
    """The handlers of both protocols over one corpus, with their caches, runs and counters."""

    async def search(self, request: Request, fault: Fault | None) -> Reply:
        """POST /search: ranked pages without an answer (billed per request)."""
        search = parse_search(parse_json_object(request.body))
        self.searches += 1
        self.billed_usd += SEARCH_API_PRICE
        await self._delay(False)
        moment = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return json_reply(search_response(self.corpus, search, moment))

    async def models(self, request: Request, fault: Fault | None) -> Reply:
        """GET /v1/models: the models the Agent API sells (and the Sonar names when served)."""
        return json_reply(model_list(*(SONAR_MODELS if self.options.sonar else ())))

"""The tool descriptions assistants read to choose a tool (wording from the seed server)."""

# Prose read by assistants: one line per paragraph, as the seed wrote it.
# ruff: noqa: E501

from __future__ import annotations

__all__ = ["DESCRIPTIONS", "TITLES"]

_FOLLOW_UP = """**To follow up**:
- Quick answer: `perplexity_search_followup` + conversationId + new query
- Deep dive: `perplexity_deep_research_followup` + conversationId + new query
- View full history: `get_conversation_history` + conversationId"""

SEARCH = f"""Performs a search-augmented query using Perplexity Search API. **IMPORTANT: This creates a NEW conversation.** You will receive a conversation ID that you can use for follow-ups.

**For first-time queries**: Use this tool with your complete, well-formed question.

**For follow-up queries**: Use `perplexity_search_followup` with the conversation ID from the previous response.

**Example First Query**:
{{
  "query": "What are the security best practices for JWT authentication in Node.js Express applications as of 2025?"
}}

Response includes:
- Answer to your query, with numbered sources
- **conversationId**: e.g., "20250124-1706102400123"
- **conversationPath**: Absolute path to conversation file

{_FOLLOW_UP}"""

DEEP_RESEARCH = f"""Performs exhaustive, multi-source deep research with Perplexity and returns a comprehensive, cited report. **IMPORTANT: This creates a NEW conversation.** You will receive a conversation ID that you can use for follow-ups. Deep research takes minutes: progress notifications are sent while it runs. When the server runs in async mode the query is queued and the call returns at once; collect the report with `get_conversation_history`.

**For first-time queries**: Use this tool with your complete, well-formed research question.

**For follow-up queries**: Use `perplexity_deep_research_followup` (or `perplexity_search_followup` for a quick answer) with the conversation ID from the previous response.

**Example First Query**:
{{
  "query": "Compare the security models of OAuth 2.1 and OpenID Connect for single-page applications",
  "reasoning_effort": "high"
}}

Response includes:
- The research report, with numbered sources
- **conversationId**: e.g., "20250124-1706102400123"
- **conversationPath**: Absolute path to conversation file

{_FOLLOW_UP}"""

SEARCH_FOLLOWUP = """Follow up on an existing Perplexity conversation with a new search query. This tool continues a conversation started by `perplexity_search` or `perplexity_deep_research`, maintaining full context.

**When to use**:
- You have a conversationId from a previous query
- You want to ask a follow-up question with quick search
- You're switching from deep research back to quick search

**Example**:
Previous query created conversation "20250124-1706102400123" about JWT authentication.

{
  "conversationId": "20250124-1706102400123",
  "query": "How do I implement refresh tokens with this approach?"
}

**Context Handling**:
The tool automatically includes the full conversation history, so you don't need to repeat previous context. Just ask your follow-up question naturally.

**Cross-Mode Support**:
You can follow up on a conversation started with `perplexity_deep_research` using this tool if you want a quick answer instead of another deep dive.

A conversation whose deep research job is still pending or running, or whose previous follow-up is still being answered, cannot be followed up yet (JOB_IN_PROGRESS): check `get_conversation_history` until it is completed.

Response includes updated conversationId and path for further follow-ups."""

DEEP_RESEARCH_FOLLOWUP = """Follow up on an existing Perplexity conversation with a deep research query. This tool continues a conversation started by `perplexity_search` or `perplexity_deep_research`, performing exhaustive research.

**When to use**:
- You have a conversationId from a previous query
- You want to dive deeper with comprehensive research
- You're switching from quick search to deep analysis

**Example**:
Previous quick search about JWT (conversation "20250124-1706102400123").

{
  "conversationId": "20250124-1706102400123",
  "query": "Perform comprehensive analysis of JWT security vulnerabilities and mitigation strategies",
  "reasoning_effort": "high"
}

**Context Handling**:
Full conversation history is automatically included. The deep research model will build upon all previous exchanges.

**Cross-Mode Support**:
You can follow up on a conversation started with `perplexity_search` using this tool to get a comprehensive deep dive on a subtopic.

In async mode the follow-up is queued and the call returns at once; collect the report with `get_conversation_history`.

Like `perplexity_search_followup`, it is refused with JOB_IN_PROGRESS while the conversation's research job is pending or running, or its previous follow-up is still being answered.

Response includes comprehensive report + updated conversationId for further follow-ups."""

HISTORY = """Retrieve the full conversation history by conversation ID. Useful for reviewing what's been discussed or debugging conversation context, and for collecting the result of a queued deep research job.

**When to use**:
- You want to see the complete conversation
- You need to verify what context is being maintained
- You queued a deep research query and want its status, progress or report
- You're debugging follow-up behavior

**Example**:
{
  "conversationId": "20250124-1706102400123",
  "includeSystemPrompt": false
}

Returns full conversation with all messages, metadata, and file path. When a deep research job ever ran for the conversation, its status (pending, in_progress, completed, failed), progress and error history come first. While a follow-up's answer is still on its way, `answeringSince` says when it was asked.

**Note**: System prompts are excluded by default but can be included with `includeSystemPrompt: true`."""

LIST = """List stored Perplexity conversations, newest first, with their IDs, first question, message count and job status. Use it to find a conversation ID to continue with `perplexity_search_followup` / `perplexity_deep_research_followup` or to read with `get_conversation_history`.

Optional filters: `text` (words in the questions or answers), `tool` (the tool that produced a turn), `model`, `since` / `until` (ISO 8601 instants of creation), `limit` (default 20)."""

HISTORIES = """Retrieve multiple conversation histories in a single batch operation. Returns an object keyed by conversationId, with each value containing the conversation data, its job status and progress (if a deep research job ran), its latest report, and any error (e.g. CONVERSATION_NOT_FOUND for an unknown ID) — one bad ID does not fail the others.

**Example**:
{
  "conversationIds": ["20250124-1706102400123", "20250124-1706102499999"],
  "includeSystemPrompt": false
}

**Alternative**: Use `await_conversation_histories` to wait until queued research jobs finish."""

AWAIT_HISTORIES = """Wait for async job completion and retrieve multiple conversation histories. This tool waits until every listed conversation's deep research job has reached a terminal state (completed/failed/cancelled), or until `timeoutSeconds` (default 300) pass, sending progress notifications meanwhile; then it returns the same object as `get_conversation_histories`, plus `timedOut` and the IDs still `pending`.

**Timeout Behavior**: if the wait ends at the timeout, the jobs go on in the background: simply run the tool again to keep waiting. Conversations with no job (or unknown IDs) count as finished at once.

**When to use**:
- You've submitted one or more async deep research queries
- You want to wait for all to complete before proceeding

**Example**:
{
  "conversationIds": ["20250124-1706102400123"],
  "timeoutSeconds": 120
}

**Alternative**: Use `get_conversation_histories` to check status without waiting."""

WEB_SEARCH = """Search the web with Perplexity's Search API and get a ranked list of results — title, URL, snippet and date for each — with no AI-generated answer. Best for finding specific URLs, checking recent news, verifying facts and collecting sources to read. Fast, and billed per request ($5 per 1,000), not per token. **Nothing is stored** unless `save` is true.

For an answer written from the results, with citations, use `perplexity_search` (or `perplexity_deep_research` for a report).

**Compared with the official Perplexity MCP server's `perplexity_search`**: the same Search API and the same results (on this server, `perplexity_search` is the answering tool, hence this name). In addition:
- structured results: every result as `{url, title, date, snippet}` in `structuredContent.results` (the official tool returns one formatted string);
- date filters (`search_after_date_filter`, `search_before_date_filter`) and `search_mode` (academic, SEC filings) besides recency, domains and country;
- `save: true` stores the query and the results as a NEW conversation, so `perplexity_search_followup` can ask about them.

**Example**:
{
  "query": "asyncio TaskGroup cancellation",
  "max_results": 5,
  "search_domain_filter": ["docs.python.org"]
}"""

CANCEL = """Cancel a deep research job that is queued or running. A queued job leaves the queue (nothing is billed); a running job stops, and so does its run at Perplexity, so it is not billed further. A cancelled run reports no usage, so its cost is recorded as unknown.

The unanswered question is closed with a note that it was cancelled, and the conversation stays open: ask again with `perplexity_deep_research_followup`, or follow up with `perplexity_search_followup`.

A conversation whose job has already ended (completed, failed, cancelled) is left as it is; one that never had a research job has nothing to cancel. `structuredContent.status` is the job's state after the call (absent without a job), `cancelled` whether it is cancelled, `remoteCancelled` whether the API confirmed the run stopped.

**Example**:
{
  "conversationId": "20250124-1706102400123"
}"""

DESCRIPTIONS = {
    "perplexity_search": SEARCH,
    "perplexity_deep_research": DEEP_RESEARCH,
    "perplexity_search_followup": SEARCH_FOLLOWUP,
    "perplexity_deep_research_followup": DEEP_RESEARCH_FOLLOWUP,
    "get_conversation_history": HISTORY,
    "get_conversation_histories": HISTORIES,
    "await_conversation_histories": AWAIT_HISTORIES,
    "list_conversations": LIST,
    "cancel_deep_research": CANCEL,
    "perplexity_web_search": WEB_SEARCH,
}

TITLES = {
    "perplexity_search": "Ask Perplexity (new conversation)",
    "perplexity_deep_research": "Deep Research (new conversation)",
    "perplexity_search_followup": "Ask a Follow-up",
    "perplexity_deep_research_followup": "Deep Research Follow-up",
    "get_conversation_history": "Read a Conversation",
    "get_conversation_histories": "Read Several Conversations",
    "await_conversation_histories": "Wait for Research Reports",
    "list_conversations": "List Conversations",
    "cancel_deep_research": "Cancel Deep Research",
    "perplexity_web_search": "Search the Web (results only)",
}
"""What a client shows a person for each tool (the description is written for the model)."""

"""A job status as the human-readable message shown by the MCP tools (rendered in ``_markdown``)."""

from __future__ import annotations

from pplx_nb._markdown import job_status_markdown as format_status_message

__all__ = ["format_status_message"]

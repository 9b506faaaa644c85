"""The magics that look back and set up: ``%pplx_history``, ``%pplx_conversations``,
``%pplx_export``, ``%pplx_config`` and ``%pplx_help``."""

from __future__ import annotations

from typing import Any

from IPython.core.magic import magics_class, no_var_expand

from pplx_nb._errors import ValidationError
from pplx_nb.notebook._input import argument, magic_arguments, output_options, unquote
from pplx_nb.notebook._kernel import CellMagics, get_researcher, line_magic, show, switch
from pplx_nb.notebook._render import conversations_frame, help_bundle, settings_bundle

__all__ = ["PplxLookbackMagics"]


@magics_class
class PplxLookbackMagics(CellMagics):
    """Stored conversations as views and DataFrames; the settings; the list of magics."""

    @no_var_expand
    @magic_arguments()
    @argument("id", nargs="?", help="conversation ID (default: the last one)")
    @argument("--system", action="store_true", help="include the system prompt")
    @output_options
    @line_magic
    def pplx_history(self, line: str) -> Any:
        """Show a stored conversation, turn by turn, with each answer's sources."""
        with self._guard(line, "%pplx_history"):
            args = self._parse(self.pplx_history, line)
            cid = self._conversation(unquote(args.id) if args.id else None)
            conversation = self.researcher.history(cid, include_system=args.system)
            self._store(args, conversation)
            return conversation
        return None

    @no_var_expand
    @magic_arguments()
    @argument("--text", help="only conversations containing TEXT")
    @argument("--tool", help="only conversations that used TOOL (e.g. perplexity_search)")
    @argument("--model", help="only conversations answered by MODEL")
    @argument("--since", help="only conversations updated since this ISO date/time")
    @argument("--until", help="only conversations updated until this ISO date/time")
    @argument("--limit", type=int, help="at most N conversations (newest first)")
    @output_options
    @line_magic
    def pplx_conversations(self, line: str) -> Any:
        """Stored conversations as a pandas DataFrame, newest first."""
        with self._guard(line, "%pplx_conversations"):
            args = self._parse(self.pplx_conversations, line)
            filters = {
                key: unquote(value) if isinstance(value, str) else value
                for key in ("text", "tool", "model", "since", "until", "limit")
                if (value := getattr(args, key)) is not None
            }
            frame = conversations_frame(self.researcher.conversations(**filters))
            self._store(args, frame)
            return frame
        return None

    @no_var_expand
    @magic_arguments()
    @argument("id", nargs="?", help="conversation ID (default: the last one)")
    @argument("--all", action="store_true", help="export every stored conversation")
    @argument("--system", action="store_true", help="with --level messages: keep system prompts")
    @argument(
        "--level",
        choices=("messages", "conversations", "sources"),
        default="messages",
        help="one row per message (default), conversation or cited source",
    )
    @output_options
    @line_magic
    def pplx_export(self, line: str) -> Any:
        """Export conversations to a pandas DataFrame (see pplx_nb.export.to_dataframe).

        Examples:
          %pplx_export -o df
          %pplx_export --all --level sources -o cited
        """
        with self._guard(line, "%pplx_export"):
            args = self._parse(self.pplx_export, line)
            from pplx_nb.export import to_dataframe

            if args.all:
                source: Any = self.researcher.store
            else:
                cid = self._conversation(unquote(args.id) if args.id else None)
                source = self.researcher.history(cid, include_system=True)
            frame = to_dataframe(source, level=args.level)
            if args.level == "messages" and not args.system and "role" in frame:
                frame = frame[frame["role"] != "system"].reset_index(drop=True)
            self._store(args, frame)
            return frame
        return None

    @no_var_expand
    @magic_arguments()
    @argument("--offline", action="store_true", help="answer from the built-in simulator")
    @argument("--online", action="store_true", help="use the real API (needs PERPLEXITY_API_KEY)")
    @output_options
    @line_magic
    def pplx_config(self, line: str) -> None:
        """Show the settings in use (the API key is never shown); switch offline/online."""
        with self._guard(line, "%pplx_config"):
            args = self._parse(self.pplx_config, line)

            if args.offline and args.online:
                raise ValidationError("Pick one of --offline and --online.")
            if args.offline or args.online:
                self._switch(offline=bool(args.offline))
            settings = self.researcher.settings
            self._store(args, settings)
            show(settings_bundle(settings.redacted()))

    def _switch(self, *, offline: bool) -> None:
        if not offline and self.researcher.settings.api_key is None:
            raise ValidationError(
                "PERPLEXITY_API_KEY is not set, so the real API would refuse every request. "
                "Set it (`%env PERPLEXITY_API_KEY=...`) and switch again, or stay offline."
            )
        switch(offline=offline)

    @line_magic
    def pplx_help(self, line: str = "") -> None:
        """Every pplx_nb magic with an example, and where the answers come from."""
        show(help_bundle(get_researcher().settings))

"""``%pplx_cite`` and ``%pplx_report``: stored answers as references and as a written report.

Both read the store (every kernel's and MCP server's conversations), so a page has the key it
has everywhere in that store (:mod:`pplx_nb.cite`).
"""

from __future__ import annotations

import argparse
import html
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from IPython.core.magic import magics_class, no_var_expand

from pplx_nb._errors import PplxError, ValidationError
from pplx_nb._fs import atomic_write_bytes, fs_errors
from pplx_nb.notebook._input import (
    argument,
    interpolate,
    magic_arguments,
    output_options,
    unquote,
)
from pplx_nb.notebook._kernel import CellMagics, line_magic, show

if TYPE_CHECKING:
    from pplx_nb._models import Answer
    from pplx_nb._web_results import WebResults
    from pplx_nb.notebook._views import Metadata
    from pplx_nb.research import Researcher

__all__ = ["PplxCiteMagics", "provenance_of", "web_provenance"]


@magics_class
class PplxCiteMagics(CellMagics):
    """References in BibTeX, CSL-JSON or RIS, and reports with a bibliography."""

    @no_var_expand
    @magic_arguments()
    @argument("ids", nargs="*", help="conversation IDs (default: the last one)")
    @argument("--all", action="store_true", help="every stored conversation")
    @argument("--format", default="bibtex", help="bibtex (default), csl-json or ris")
    @argument("--consulted", action="store_true", help="also the sources answers only consulted")
    @argument("--file", dest="path", metavar="PATH", help="write the references to PATH")
    @argument("--force", action="store_true", help="with --file: overwrite PATH if it exists")
    @output_options
    @line_magic
    def pplx_cite(self, line: str) -> str | None:
        """The references of conversations in BibTeX, CSL-JSON or RIS.

        Examples:
          %pplx_cite
          %pplx_cite 20261128-1764300000000 --format csl-json -o refs
          %pplx_cite --all --file references.bib
        """
        with self._guard(line, "%pplx_cite"):
            args = self._parse(self.pplx_cite, line)
            from pplx_nb import cite

            fmt = cite.check_format(unquote(args.format))
            store = self.researcher.store
            ids = self._ids(args)  # first: --all with IDs is refused, not half-read
            source: Any = store if args.all else ids
            references = cite.collect(source, store=store, consulted=args.consulted)
            text = cite.write_references(references, fmt)
            where = None
            if args.path:
                where = _write_new(self._path(args.path), text, force=args.force)
            self._store(args, text)
            show(_references_bundle(text, len(references), fmt, where))
            return None
        return None

    @no_var_expand
    @magic_arguments()
    @argument("ids", nargs="*", help="conversation IDs, in report order (default: the last one)")
    @argument(
        "--file",
        dest="path",
        metavar="PATH",
        default="report.md",
        help="the Markdown report (report.md)",
    )
    @argument("--style", default="apa", help="apa (default), chicago-author-date, ieee or a .csl")
    @argument("--title", help="the report's title (default: Research report)")
    @argument("--thinking", action="store_true", help="include each answer's thinking")
    @argument("--failed", action="store_true", help="include questions that got no answer")
    @argument("--consulted", action="store_true", help="also cite sources only consulted")
    @argument("--force", action="store_true", help="overwrite the report's files if they exist")
    @output_options
    @line_magic
    def pplx_report(self, line: str) -> None:
        """Write conversations up as one report: Markdown + references.bib for pandoc, and HTML.

        Examples:
          %pplx_report --file report.md
          %pplx_report ID1 ID2 --style ieee --file out/report.md --title "Asyncio notes"
        """
        with self._guard(line, "%pplx_report"):
            args = self._parse(self.pplx_report, line)
            from pplx_nb import cite

            report = cite.to_report(
                self.researcher.store,
                self._ids(args),
                self._path(args.path),
                style=unquote(args.style),
                title=unquote(args.title) if args.title else None,
                thinking=args.thinking,
                failed=args.failed,
                consulted=args.consulted,
                force=args.force,
            )
            self._store(args, report)
            show(_report_bundle(report))

    def _path(self, given: str) -> Path:
        """A ``--file`` as written, with ``{name}`` fields filled as in questions."""
        return Path(interpolate(unquote(given), self.namespace))

    def _ids(self, args: argparse.Namespace) -> list[str]:
        if getattr(args, "all", False):
            if args.ids:
                raise ValidationError("Pass conversation IDs or --all, not both.")
            return []
        given = [unquote(i) for i in args.ids]
        return [self._conversation(i) for i in given] if given else [self._conversation(None)]


def provenance_of(answer: Answer, researcher: Researcher) -> Metadata | None:
    """An answer's output metadata, ``{"pplx_nb": record}`` (:mod:`pplx_nb._provenance`):
    where it is stored and what it was. ``None`` when it is not stored or the store cannot be
    read now; a display never fails for its provenance."""
    # Imported here: %load_ext pplx_nb loads this module and must not load pydantic.
    from pplx_nb._provenance import METADATA_KEY, find_turn, record

    if not answer.conversation_id:
        return None
    try:
        conversation = researcher.history(answer.conversation_id, include_system=True)
    except PplxError:
        return None
    turn = find_turn(conversation, answer.text)
    if turn is None:
        return None
    found = record(conversation, turn, response_id=answer.response_id, effort=answer.effort)
    return {METADATA_KEY: dict(found)}


def web_provenance(results: WebResults) -> Metadata:
    """Web results' output metadata: the query, the pages, when (and the conversation, when
    they were saved)."""
    from pplx_nb._provenance import METADATA_KEY, web_record

    urls = [source.url for source in results]
    return {METADATA_KEY: dict(web_record(results.query, urls, results.conversation_id))}


def _write_new(path: Path, text: str, *, force: bool) -> Path:
    path = path.expanduser()
    if path.is_dir() or not path.name:
        raise ValidationError(
            f"--file {path} is a folder: name the file to write, e.g. --file {path / 'refs.bib'}."
        )
    if path.exists() and not force:
        raise ValidationError(
            f"{path} already exists; nothing was written. Choose another `--file`, or add "
            "`--force` to overwrite it."
        )
    with fs_errors(path, "write the references to"):
        path.parent.mkdir(parents=True, exist_ok=True)  # as %pplx_report does
        atomic_write_bytes(path, text.encode("utf-8"))
    return path


def _references_bundle(text: str, count: int, fmt: str, where: Path | None) -> dict[str, str]:
    if count == 0:
        note = "No sources to cite: the answers chosen cite none. The bibliography is empty."
        return {"text/plain": note, "text/html": f"<p>{html.escape(note)}</p>"}
    noun = "reference" if count == 1 else "references"
    said = f"{count} {noun} ({fmt})" + (f", written to {where}" if where else "")
    return {
        "text/plain": f"{said}\n\n{text}",
        "text/html": (
            f"<p>{html.escape(said)}</p>"
            f'<pre style="max-height: 24em; overflow: auto">{html.escape(text)}</pre>'
        ),
    }


def _report_bundle(report: Any) -> dict[str, str]:
    noun = "reference" if report.references == 1 else "references"
    said = (
        f"Report written: {report.sections} sections, {report.references} {noun}. "
        f"{report.markdown} (render with `pandoc --citeproc {report.markdown.name} -o "
        f"report.pdf` beside {report.bibliography.name}), and {report.html} (ready to read)."
    )
    links = " · ".join(_link(p) for p in (report.html, report.markdown, report.bibliography))
    return {
        "text/plain": said,
        "text/html": (
            f"<p>Report written: {report.sections} sections, {report.references} {noun}.</p>"
            f"<p>{links}</p>"
            f"<p>Render the Markdown in any format with <code>pandoc --citeproc "
            f"{html.escape(report.markdown.name)} -o report.pdf</code>.</p>"
        ),
    }


def _link(path: Path) -> str:
    """A link JupyterLab opens for a file under the working directory (the notebook's
    folder); elsewhere the path, which a browser page cannot open.

    Percent-encoded and starting with ``./``: a file named ``javascript:x.md`` or ``a#b.md``
    is a path, never a scheme or a fragment."""
    try:
        relative = path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return f"<code>{html.escape(str(path))}</code>"
    return (
        f'<a href="./{html.escape(quote(relative.as_posix()))}" target="_blank">'
        f"{html.escape(path.name)}</a>"
    )

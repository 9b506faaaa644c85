"""References (:mod:`pplx_nb._references`) written as BibTeX (biblatex), CSL-JSON and RIS.

BibTeX goes through ``bibtexparser`` 2 and RIS through ``rispy``; CSL-JSON is the items
themselves. The BibTeX is biblatex's dialect (``@online``, ``urldate``, ``date``), which is what
pandoc reads from a ``.bib`` file and what biber and Zotero import.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Literal, get_args

import rispy
from bibtexparser import model
from bibtexparser.entrypoint import write_string
from bibtexparser.library import Library
from bibtexparser.middlewares.parsestack import default_unparse_stack

from pplx_nb._option_names import option_error
from pplx_nb._references import CslDate, CslItem, Reference, to_csl_json_dict

__all__ = ["FORMATS", "Format", "check_format", "write_references"]

Format = Literal["bibtex", "csl-json", "ris"]
FORMATS: tuple[str, ...] = get_args(Format)

_BIBTEX_TYPES = {"webpage": "online", "article-journal": "article", "article": "online"}
_RIS_TYPES = {"webpage": "ELEC", "article-journal": "JOUR", "article": "EJOUR"}
# LaTeX's special characters, and the ligatures TeX would make of plain text ("--" is an en
# dash, "``" an opening quote): written so that LaTeX prints the characters as they were.
# bibtexparser's LatexEncodingMiddleware would also turn every non-ASCII letter into a macro
# (and warn on those it has none for, such as CJK); biblatex and pandoc read UTF-8 as it is.
_LATEX = {
    "\\": r"\textbackslash{}",
    "{": r"\{",
    "}": r"\}",
    "%": r"\%",
    "&": r"\&",
    "#": r"\#",
    "_": r"\_",
    "$": r"\$",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}
_PLAIN = re.compile(r"[^\\{}%&#_$~^`'?!-]*")
_LATEX_SPECIAL = re.compile(r"[\\{}%&#_$~^]|(?<=-)(?=-)|(?<=`)(?=`)|(?<=')(?=')|(?<=[?!])(?=`)")


def check_format(value: str) -> Format:
    """``value`` as a :data:`Format`, or VALIDATION_ERROR naming the option as each surface
    writes it."""
    if value not in FORMATS:
        raise option_error(
            "{given} is not a citation format: use one of " + ", ".join(FORMATS) + ".",
            "format",
            value,
        )
    return value  # type: ignore[return-value]


def latex_text(text: str) -> str:
    """``text`` as LaTeX that prints it unchanged (UTF-8 letters kept as they are)."""
    if _PLAIN.fullmatch(text):
        return text
    return _LATEX_SPECIAL.sub(lambda m: _LATEX.get(m.group(0), "{}"), text)


def _iso(parts: CslDate | None) -> str | None:
    if parts is None:
        return None
    return "-".join(f"{p:02d}" if i else str(p) for i, p in enumerate(parts["date_parts"][0]))


def _bibtex_entry(item: CslItem) -> model.Entry:
    fields = [
        model.Field("title", latex_text(item["title"])),
        model.Field("url", item["URL"]),
    ]
    site = item.get("container_title")
    if site:
        name = "journaltitle" if item["type"] == "article-journal" else "organization"
        fields.append(model.Field(name, latex_text(site)))
    for name, value in (
        ("date", _iso(item.get("issued"))),
        ("urldate", _iso(item.get("accessed"))),
    ):
        if value:
            fields.append(model.Field(name, value))
    if "DOI" in item:
        fields.append(model.Field("doi", item["DOI"]))
    if item.get("publisher") == "arXiv" and "number" in item:
        fields.append(model.Field("eprint", item["number"].removeprefix("arXiv:")))
        fields.append(model.Field("eprinttype", "arxiv"))
    return model.Entry(_BIBTEX_TYPES[item["type"]], item["id"], fields)


def to_bibtex_text(references: Sequence[Reference]) -> str:
    """The references as a biblatex ``.bib`` file."""
    library = Library([_bibtex_entry(r.item) for r in references])
    # The library is ours and thrown away: bibtexparser need not deep-copy every entry.
    stack = default_unparse_stack(allow_inplace_modification=True)
    return write_string(library, unparse_stack=stack) if references else ""


def to_csl_json_text(references: Sequence[Reference]) -> str:
    """The references as a CSL-JSON array."""
    items = [to_csl_json_dict(r.item) for r in references]
    return json.dumps(items, ensure_ascii=False, indent=2) + "\n"


def _ris_date(parts: CslDate | None) -> str | None:
    if parts is None:
        return None
    values = [*parts["date_parts"][0], None, None][:3]
    return "/".join(f"{v:02d}" if i and v else (str(v) if v else "") for i, v in enumerate(values))


def _ris_record(item: CslItem) -> dict[str, Any]:
    record: dict[str, Any] = {
        "type_of_reference": _RIS_TYPES[item["type"]],
        "id": item["id"],
        "title": item["title"],
        "urls": [item["URL"]],
    }
    if "container_title" in item:
        record["secondary_title"] = item["container_title"]
    issued = item.get("issued")
    if issued:
        record["year"] = str(issued["date_parts"][0][0])
        record["date"] = _ris_date(issued)
    accessed = _ris_date(item.get("accessed"))
    if accessed:
        record["access_date"] = accessed
    for field, name in (("DOI", "doi"), ("publisher", "publisher"), ("number", "number")):
        if field in item:
            record[name] = item[field]  # type: ignore[literal-required]
    return record


class _RisWriter(rispy.RisWriter):  # type: ignore[misc]
    """rispy's writer without the "1." it puts before each record (no RIS tag: some importers
    take it for a broken line)."""

    def set_header(self, count: int) -> str:
        return ""


def to_ris_text(references: Sequence[Reference]) -> str:
    """The references as an RIS file."""
    records = [_ris_record(r.item) for r in references]
    return rispy.dumps(records, implementation=_RisWriter) if records else ""


def write_references(references: Sequence[Reference], fmt: Format) -> str:
    """The references in ``fmt``."""
    writers = {"bibtex": to_bibtex_text, "csl-json": to_csl_json_text, "ris": to_ris_text}
    return writers[fmt](references)

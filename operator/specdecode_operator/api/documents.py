"""SpecDecodeDeployment files as the CLIs read them: the bounded reader, then admission exactly as the API server."""

from __future__ import annotations

from typing import Any, Callable

from specdecode_runtime.contract.input_files import InputError, load_documents

from .models import SpecDecodeDeployment
from .validate import InvalidSpec, Problem, parse


def _describe(index: int, doc: Any) -> str:
    if isinstance(doc, dict):
        metadata = doc.get("metadata")
        name = metadata.get("name") if isinstance(metadata, dict) else None
        return f"document {index + 1} ({doc.get('kind', '?')}/{name or '?'})"
    return f"document {index + 1}"


def load_sdds(
    path: str, serving_problems: Callable[[SpecDecodeDeployment], list[Problem]] | None = None
) -> list[SpecDecodeDeployment]:
    """Every SpecDecodeDeployment in the file (``-``: stdin), validated with the CRD's schema and CEL rules, then
    with ``serving_problems`` (what the runtime would refuse; the renderer's, which sits above this package); every
    problem of every document in one :class:`InputError`."""

    source = "<stdin>" if path == "-" else path
    docs = load_documents(path)
    if not docs:
        raise InputError(source, ["no documents found"])
    sdds, errors = [], []
    for index, doc in enumerate(docs):
        try:
            sdd = parse(doc)
            problems = serving_problems(sdd) if serving_problems else []
        except InvalidSpec as e:
            problems = e.problems
        if problems:
            errors.append(f"{_describe(index, doc)}:")
            errors.extend(f"  {p}" for p in problems)
        else:
            sdds.append(sdd)
    if errors:
        raise InputError(source, errors)
    return sdds

"""SpecDecodeDeployment files as the CLIs read them: the bounded reader, then admission exactly as the API server."""

from __future__ import annotations

from typing import Any

from specdecode_runtime.contract.input_files import InputError, load_documents

from .models import SpecDecodeDeployment


def _describe(index: int, doc: Any) -> str:
    if isinstance(doc, dict):
        metadata = doc.get("metadata")
        name = metadata.get("name") if isinstance(metadata, dict) else None
        return f"document {index + 1} ({doc.get('kind', '?')}/{name or '?'})"
    return f"document {index + 1}"


def load_sdds(path: str) -> list[SpecDecodeDeployment]:
    """Every SpecDecodeDeployment in the file (``-``: stdin), validated with the CRD's schema and CEL rules; every
    problem of every document in one :class:`InputError`."""
    from .validate import InvalidSpec, parse

    source = "<stdin>" if path == "-" else path
    docs = load_documents(path)
    if not docs:
        raise InputError(source, ["no documents found"])
    sdds, errors = [], []
    for index, doc in enumerate(docs):
        try:
            sdds.append(parse(doc))
        except InvalidSpec as e:
            errors.append(f"{_describe(index, doc)}:")
            errors.extend(f"  {p}" for p in e.problems)
    if errors:
        raise InputError(source, errors)
    return sdds

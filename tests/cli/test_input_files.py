"""The one bounded reader every command uses: size, UTF-8, depth, expansion and duplicate keys."""

import io

import pytest

from specdecode_runtime.contract.input_files import (
    BoundedLoader,
    InputError,
    load_documents,
    load_single,
    parse_yaml_documents,
    read_text,
)


def errors(text: str) -> list[str]:
    with pytest.raises(InputError) as exc:
        parse_yaml_documents(text, "f.yaml")
    assert exc.value.source == "f.yaml"
    return exc.value.errors


def test_duplicate_keys_name_both_lines():
    (e,) = errors("a: 1\nb: 2\na: 3\n")
    assert "line 3" in e and "duplicate key 'a' (first on line 1)" in e
    (e,) = errors("spec: {draft: {model: x, model: y}}\n")
    assert "duplicate key 'model'" in e


def test_merge_keys_may_override():
    assert parse_yaml_documents("b: &b {x: 1, y: 2}\nc: {<<: *b, x: 3}\n", "f") == [
        {"b": {"x": 1, "y": 2}, "c": {"x": 3, "y": 2}}
    ]


def test_deep_nesting_is_refused_at_the_bound_not_by_recursion():
    depth = BoundedLoader.max_depth
    assert parse_yaml_documents("[" * (depth - 1) + "]" * (depth - 1), "f")
    for text in (
        "[" * 5000 + "]" * 5000,
        "a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 200)) + "  x: 1",
        "{a: " * 3000 + "1" + "}" * 3000,
    ):
        (e,) = errors(text)
        assert f"nested deeper than {depth} levels" in e


def test_alias_expansion_is_bounded():
    bomb = "a: &a [1,1,1,1,1,1,1,1,1,1]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefg", "bcdefgh")
    )
    (e,) = errors(bomb)
    assert "expands to more than" in e
    assert parse_yaml_documents("a: &x [1, 2]\nb: *x\n", "f") == [{"a": [1, 2], "b": [1, 2]}]


def test_yaml_12_numbers_like_the_api_server():
    assert parse_yaml_documents("a: 1e30\nb: 1e3\nc: '1e3'\nd: 1.5\n", "f") == [
        {"a": 1e30, "b": 1000.0, "c": "1e3", "d": 1.5}
    ]


def test_invalid_yaml_names_line_and_column():
    (e,) = errors("a: [1, 2\nb: 3\n")
    assert e.startswith("line ") and "not valid YAML" in e


def test_non_utf8_names_the_line_and_byte(tmp_path):
    f = tmp_path / "latin1.yaml"
    f.write_bytes("name: caf\u00e9\n".encode("latin-1"))
    with pytest.raises(InputError) as exc:
        load_documents(str(f))
    assert str(exc.value) == f"{f}: line 1: not UTF-8 text (byte 0xe9 at offset 9); save the file as UTF-8"


def test_size_bound(tmp_path):
    f = tmp_path / "big.yaml"
    f.write_text("a: " + "x" * 2000)
    with pytest.raises(InputError, match="larger than 1000 bytes"):
        read_text(str(f), max_bytes=1000)
    assert read_text(str(f), max_bytes=5000).startswith("a: x")


def test_stdin_and_missing_files(tmp_path):
    stdin = io.TextIOWrapper(io.BytesIO(b"a: 1\n---\nb: 2\n"))
    assert parse_yaml_documents(read_text("-", stdin=stdin), "<stdin>") == [{"a": 1}, {"b": 2}]
    with pytest.raises(InputError, match="cannot read file: No such file"):
        load_documents(str(tmp_path / "missing.yaml"))
    with pytest.raises(InputError, match="cannot read file"):
        load_documents(str(tmp_path))  # a directory


def test_load_single_wants_one_mapping(tmp_path):
    f = tmp_path / "x.yaml"
    for text, fragment in (
        ("", "empty"),
        ("a: 1\n---\nb: 2\n", "holds 2 YAML documents"),
        ("- 1\n", "expected a mapping (thing), got a list"),
    ):
        f.write_text(text)
        with pytest.raises(InputError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
            load_single(str(f), what="thing")


def test_control_token_file_is_read_bounded(tmp_path):
    """The step-control token is an input file too: non-UTF-8 or oversized means no token (every request 401)."""
    from specdecode_runtime.control import MAX_TOKEN_BYTES, TokenFile

    f = tmp_path / "token"
    f.write_text("s3cret\n")
    tokens = TokenFile(f)
    assert tokens.authorized("Bearer s3cret") and not tokens.authorized("Bearer other")
    f.write_bytes(b"\xff\xfe")
    assert tokens.token() == "" and not tokens.authorized("Bearer \xff\xfe")
    f.write_text("x" * (MAX_TOKEN_BYTES + 1))
    assert tokens.token() == ""

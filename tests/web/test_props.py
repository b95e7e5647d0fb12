"""Properties of the HTTP request parser, the Authorization parser and the web config parser:
any input gives a result or the parser's own error, never another exception."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from exporter.web.auth import parse_basic
from exporter.web.config import MAX_DEPTH, WebConfigError, parse_web_config
from exporter.web.http import HttpError, parse_head
from tests.support.props import PROPERTY

token = st.text(
    alphabet="!#$%&'*+.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-",
    min_size=1,
    max_size=12,
)
target = st.text(alphabet="".join(chr(c) for c in range(0x21, 0x7F)), min_size=0, max_size=40)
value = st.text(alphabet="".join(chr(c) for c in range(0x20, 0x7F)) + "\t", max_size=40)


@PROPERTY
@given(
    method=token,
    path=target,
    version=st.sampled_from(["HTTP/1.0", "HTTP/1.1"]),
    headers=st.lists(st.tuples(token, value), max_size=20),
    crlf=st.booleans(),
)
def test_valid_heads_round_trip(
    method: str, path: str, version: str, headers: list[tuple[str, str]], crlf: bool
) -> None:
    eol = "\r\n" if crlf else "\n"
    lines = [f"{method} /{path} {version}", *(f"{k}: {v}" for k, v in headers)]
    raw = eol.join(lines).encode("latin-1")
    names = [k.lower() for k, _ in headers]
    duplicated = names.count("authorization") > 1 or names.count("content-length") > 0
    try:
        req = parse_head(raw)
    except HttpError as exc:
        assert duplicated or exc.status == 400
        return
    assert req.method == method and req.version == version
    assert req.target == f"/{path}" and req.path == f"/{path}".split("?", 1)[0]
    assert req.headers == tuple((k.lower(), v.strip(" \t")) for k, v in headers)


@PROPERTY
@given(st.binary(max_size=600))
def test_any_bytes_parse_or_fail_cleanly(raw: bytes) -> None:
    try:
        req = parse_head(raw)
    except HttpError as exc:
        assert exc.status in (400, 431, 505)
        return
    assert req.method and req.path.startswith("/")
    assert req.version in ("HTTP/1.0", "HTTP/1.1")


@PROPERTY
@given(st.text(max_size=100))
def test_any_authorization_header(header: str) -> None:
    parsed = parse_basic(header)
    assert parsed is None or (":" not in parsed[0] and isinstance(parsed[1], bytes))


@PROPERTY
@given(
    st.text(
        alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters=":\0"),
        max_size=20,
    ),
    st.binary(max_size=80),
)
def test_basic_credentials_round_trip(user: str, password: bytes) -> None:
    header = "Basic " + base64.b64encode(user.encode() + b":" + password).decode()
    assert parse_basic(header) == (user, password)


# YAML-shaped noise: the config parser sees structure, not only syntax errors
leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20), st.floats())
tree = st.recursive(
    leaf,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "tls_server_config",
                    "http_server_config",
                    "basic_auth_users",
                    "cert_file",
                    "key_file",
                    "client_auth_type",
                    "client_ca_file",
                    "min_version",
                    "max_version",
                    "cipher_suites",
                    "headers",
                    "http2",
                    "X-Frame-Options",
                    "u",
                ]
            )
            | st.text(max_size=8),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@PROPERTY
@given(tree)
def test_any_yaml_structure_is_accepted_or_refused_with_a_message(data: object) -> None:
    text = yaml.safe_dump(data)
    try:
        parse_web_config(text, Path("/etc/wattprobe"))
    except WebConfigError as exc:
        assert str(exc) and "\n" not in str(exc)


@PROPERTY
@given(st.text(max_size=300))
@example("? t HTTP/1.1\n\n\n ?")  # found by atheris: a complex key holding newlines
def test_any_text_is_accepted_or_refused_with_a_message(text: str) -> None:
    try:
        parse_web_config(text, Path("/etc/wattprobe"))
    except WebConfigError as exc:
        assert str(exc) and "\n" not in str(exc)


def _nested(depth: int, style: str) -> str:
    """A document `depth` collections deep, in flow or block style, mappings or sequences."""
    if style == "flow-seq":
        return "[" * depth + "]" * depth
    if style == "flow-map":
        return "{a: " * depth + "1" + "}" * depth
    if style == "block-map":
        return "".join(" " * i + f"k{i}:\n" for i in range(depth)) + " " * depth + "v\n"
    return "".join(" " * (2 * i) + "- " + ("\n" if i < depth - 1 else "x\n") for i in range(depth))


@PROPERTY
@given(
    depth=st.integers(min_value=1, max_value=3000),
    style=st.sampled_from(["flow-seq", "flow-map", "block-map", "block-seq"]),
    section=st.sampled_from(["", "basic_auth_users:\n  u: ", "tls_server_config:\n  cert: "]),
)
@example(depth=500, style="flow-seq", section="")  # a RecursionError traceback at start
@example(depth=600, style="block-map", section="")
def test_deep_nesting_is_one_line_not_a_recursion_error(
    depth: int, style: str, section: str
) -> None:
    text = section + _nested(depth, style)
    try:
        parse_web_config(text, Path("/etc/wattprobe"))
    except WebConfigError as exc:
        message = str(exc)
        assert message and "\n" not in message and len(message) < 200
        # (a block collection after "key: " on one line is plain invalid YAML, refused first)
        if depth > MAX_DEPTH and (style.startswith("flow") or not section):
            assert "nested deeper than" in message

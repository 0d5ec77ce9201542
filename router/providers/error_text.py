"""The text of an upstream error as a client may see it: its message cut to one clean line, and
the upstream's own `code` and `param` read from its error body.

Messages reach clients, so each is cut to one clean line (`clean_message`): no traceback, no
file path, no library class prefix such as `litellm.BadRequestError: OpenAIException - `, no
secret (an upstream may quote the key it was sent: secret-shaped strings are scrubbed here, and
the adapters take out their deployment's own key, whatever its shape, with `without_key`).
Which project error an upstream failure is lives elsewhere (`router.providers.upstream_answers`
for statuses and bodies, `router.providers.exception_mapping` for exceptions).
"""

from __future__ import annotations

import ast
import re

import orjson

from router import errors as e
from router.providers import lone_surrogates
from router.telemetry.redact import scrub

MAX_MESSAGE_CHARS = 300
SCAN_CHARS = 8192  # how much of an upstream's text is looked at (a message comes first)

_TRACEBACK = "Traceback (most recent call last)"
# A class name, or litellm's provider prefix and class (`Vertex_ai_betaException
# BadRequestError - `, `AzureException APIError - `, `geminiException - `), before `:` or `-`.
_PREFIX = re.compile(
    r"^\s*(?:litellm\.\w+\s*:|(?:[A-Za-z]\w*)?(?:Error|Exception|Timeout)"
    r"(?:\s+[A-Z]\w*(?:Error|Exception))?\s*(?::|-)|LiteLLM:|Error code:\s*\d{3}\s*-)\s*")
_OBJECT_REPR = re.compile(r"<[\w.]+ object at 0x[0-9a-fA-F]+>")
# An exception's repr inside a message (aiohttp: `<TransferEncodingError: 400, message='...'>`):
# its words are kept, its class name and brackets are not.
_ERROR_REPR = re.compile(r"<[\w.]*(?:Error|Exception)\b:?\s*([^<>]*)>")
_LITELLM_NOTES = re.compile(
    r"(?:Handle with `?litellm\.\w+`?\.?|LiteLLM (?:Max )?Retri(?:ed|es):.*"
    r"|Received Model Group=.*|This looks like a bug in LiteLLM.*)$")
_FILE_PATH = re.compile(
    r"(?<![\w.\-/\\])(?:[A-Za-z]:)?[\\/](?:[\w.\-]+[\\/])+[\w.\-]+\.pyc?\b(?:\", line \d+|:\d+)?")
_SPACES = re.compile(r"\s+")
_CODE = re.compile(r"^[A-Za-z0-9_.:\-]{1,64}$")


def clean_message(text: str) -> str:
    """`text` as one clean line for a client: no traceback, file path, object repr, library
    class prefix or litellm note; a JSON or dict error body is reduced to its message."""
    text = text[:SCAN_CHARS]
    cut = text.find(_TRACEBACK)
    if cut >= 0:
        text = text[:cut]
    lines = [line for line in text.splitlines() if line.strip()]
    line = _SPACES.sub(" ", lines[0]).strip() if lines else ""
    for _ in range(8):
        stripped = _PREFIX.sub("", line, count=1)
        if stripped == line:
            break
        line = stripped
    message, _, _ = error_fields(line)
    if message is not None and message != line:
        return clean_message(message)
    line = line[:4 * MAX_MESSAGE_CHARS]  # what is left of it: at most a message's length
    line = _LITELLM_NOTES.sub("", _ERROR_REPR.sub(r"\1", _OBJECT_REPR.sub("", line)))
    line = _FILE_PATH.sub("<path>", line)
    line = _SPACES.sub(" ", scrub(line)).strip(" ,")
    if len(line) > MAX_MESSAGE_CHARS:
        line = line[:MAX_MESSAGE_CHARS - 1].rstrip() + "…"
    return line


def message_of(exc: BaseException) -> str:
    """`exc`'s message (its `message` attribute, else its text) cleaned for a client."""
    return clean_message(str(getattr(exc, "message", None) or exc))


def bytes_literal(text: str) -> str | None:
    """The text of the bytes literal `text` begins with (`b'...'`, up to its last quote of
    that kind), or None when it is not one."""
    end = text.rfind(text[1:2] or "'", 2)
    try:
        quoted = ast.literal_eval(text[:end + 1]) if end > 1 else None
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return quoted.decode("utf-8", "replace") if isinstance(quoted, bytes) else None


def error_fields(text: str) -> tuple[str | None, str | None, str | None]:
    """(message, code, param) of an error body given as JSON or a Python dict's repr."""
    stripped = text.strip()
    if stripped[:2] in ("b'", 'b"'):
        # A body quoted as bytes (litellm's streamed errors: `b'{"type":"error",...}'.`, the
        # sentence's full stop after it).
        quoted = bytes_literal(stripped)
        if quoted is not None:
            stripped = quoted.strip()
    if not stripped.startswith("{"):
        return None, None, None
    parsed: object = None
    try:
        parsed = orjson.loads(stripped)
    except orjson.JSONDecodeError:
        # JSON with half an emoji (a lone surrogate escape), read well-formed: as the repr
        # below, it left a string the router's own JSON writer refused (a 500 for a 400)
        fixed = lone_surrogates.repaired(stripped.encode("utf-8", "surrogatepass"))
        try:
            parsed = fixed[0] if fixed is not None else ast.literal_eval(stripped)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            # A body cut short (a truncated repr): take what there is of the message.
            match = re.search(r"""['"]message['"]\s*:\s*(['"])(.*?)(?:(?<!\\)\1|$)""", stripped)
            return (lone_surrogates.well_formed(match.group(2)) if match else None), None, None
    return _fields_of(lone_surrogates.well_formed(parsed))


def _fields_of(body: object) -> tuple[str | None, str | None, str | None]:
    if not isinstance(body, dict):
        return None, None, None
    inner = body.get("error")
    if isinstance(inner, dict):
        body = inner
    elif isinstance(inner, str) and "message" not in body:
        return inner, None, None
    message = body.get("message", body.get("detail"))
    code, param = body.get("code"), body.get("param")
    return (message if isinstance(message, str) else None,
            code if isinstance(code, str) else None,
            param if isinstance(param, str) else None)


def upstream_fields(exc: BaseException) -> tuple[str | None, str | None]:
    """The upstream's own (code, param) for `exc`: from the SDK's parsed body, the exception's
    attributes, or the response it carries."""
    _, code, param = _fields_of(getattr(exc, "body", None))
    code = code if code is not None else _str_attr(exc, "code")
    param = param if param is not None else _str_attr(exc, "param")
    if code is None or param is None:
        _, body_code, body_param = error_fields(_response_text(exc))
        code = code if code is not None else body_code
        param = param if param is not None else body_param
    return clean_code(code), clean_param(param)


def _str_attr(exc: BaseException, name: str) -> str | None:
    value = getattr(exc, name, None)
    return value if isinstance(value, str) else None


def _response_text(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    try:
        text = getattr(response, "text", "")
    except Exception:  # a streamed httpx response that was never read, among others
        return ""
    return text[:SCAN_CHARS] if isinstance(text, str) else ""


def clean_code(code: str | None) -> str | None:
    """An upstream's `code` when it is a short identifier with no secret in it, else None."""
    return code if code is not None and _CODE.match(code) and scrub(code) == code else None


def clean_param(param: str | None) -> str | None:
    """An upstream's `param` on one line, secrets scrubbed, at most 200 characters."""
    if param is None:
        return None
    param = _SPACES.sub(" ", scrub(param)).strip()
    return param[:200] if param else None


def without_key(err: e.SlorouterError, key: str | None) -> e.SlorouterError:
    """`err` with the deployment's own API key taken out of what reaches the client (an
    upstream may quote the key it was sent, in any shape); secret-shaped strings already are
    (`clean_message`). The adapters pass every error through it."""
    if key:
        err.message = scrub(err.message, (key,))
        err.args = (err.message,)
        err.param = err.param and scrub(err.param, (key,))
        if err.code and scrub(err.code, (key,)) != err.code:
            err.code = None
    return err

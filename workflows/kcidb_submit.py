"""`krig export kcidb ... --submit URL --token-file FILE`: a report to KCIDB-ng's REST API.

KCIDB-ng takes `POST /submit` with the report as the body and the origin's token
as `Authorization: Bearer <token>`, and answers `{"id": ..., "status": "ok"}`.
The token is read from a file only its owner can read (0600), is sent only in
that header to the URL given (redirects are not followed, a URL carrying
credentials is refused, plain http only to this machine), and is never in an
argv, an environment, a log or an error message.
"""
import ipaddress
import json
import re
import urllib.error
import urllib.parse
import urllib.request

from krig.config import read_secret_file
from krig.errors import KrigError, UsageError

TIMEOUT = 120
MAX_ANSWER = 1 << 20
_TOKEN_RE = re.compile(r"^[\x21-\x7e]+$")


def read_token(path) -> str:
    token = read_secret_file(path, "--token-file").strip()
    if not _TOKEN_RE.match(token):
        raise UsageError(f"--token-file: {path}: the first line must be the token alone "
                         "(printable ASCII, no spaces)")
    return token


def endpoint(url: str) -> str:
    """The URL to POST to: the one given, or its /submit when it is a base URL."""
    try:
        u = urllib.parse.urlsplit(url)
        host, creds = u.hostname, u.username is not None or u.password is not None
    except ValueError:
        u, host, creds = None, None, "@" in url
    if creds:           # the URL is not repeated: what it carries is a secret
        raise UsageError("--submit: the URL carries credentials (user@host); give the token only with "
                         "--token-file")
    if u is None or u.scheme not in ("http", "https") or not host:
        raise UsageError(f"--submit {url!r}: expected an https:// URL of a KCIDB-ng server "
                         "(its base URL or its /submit endpoint)")
    if u.scheme == "http" and not _loopback(host):
        raise UsageError(f"--submit {url!r}: http:// would send the token in clear; use https:// "
                         "(http:// only to this machine: 127.0.0.1, ::1, localhost)")
    path = u.path if u.path not in ("", "/") else "/submit"
    return urllib.parse.urlunsplit((u.scheme, u.netloc, path, u.query, ""))


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """The token goes only to the URL given: a redirect is an error, not a second request."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def submit(url: str, token: str, body: bytes) -> str:
    """POST the report; returns the submission id KCIDB-ng answered. Every failure is one line."""
    target = shown = endpoint(url)
    req = urllib.request.Request(target, data=body, method="POST", headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(req, timeout=TIMEOUT) as r:
            answer = r.read(MAX_ANSWER)
    except urllib.error.HTTPError as e:
        detail = _said(e.read(4096) if e.fp else b"", token)
        where = f" (to {e.headers.get('Location')}; not followed)" if 300 <= e.code < 400 else ""
        raise KrigError(f"--submit {shown}: HTTP {e.code} {e.reason}{where}{': ' + detail if detail else ''}") from None
    except urllib.error.URLError as e:
        raise KrigError(f"--submit {shown}: cannot reach the server: {_clean(str(e.reason), token)}") from None
    except (OSError, ValueError) as e:       # a reset connection, a timeout, a malformed answer
        raise KrigError(f"--submit {shown}: {_clean(str(e) or type(e).__name__, token)}") from None
    try:
        data = json.loads(answer)
        sid = data.get("id") if isinstance(data, dict) else None
    except ValueError:
        sid = None
    if not sid or str(sid) == "0":
        raise KrigError(f"--submit {shown}: the server answered without a submission id: "
                        f"{_said(answer, token) or '(empty)'}")
    return str(sid)


def _said(raw: bytes, token: str) -> str:
    """What the server said, one line: its JSON "message" if it has one."""
    text = raw.decode(errors="replace")
    try:
        data = json.loads(text)
        if isinstance(data, dict) and data.get("message"):
            text = str(data["message"])
    except ValueError:
        pass
    return _clean(" ".join(text.split())[:300], token)


def _clean(text: str, token: str) -> str:
    return text.replace(token, "<token>") if token else text

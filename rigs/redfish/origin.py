"""What the Redfish client sends and reads, held to the BMC's own origin.

Every request sushy makes goes through a requests Session whose adapters (BmcAdapter, on
https:// and http:// alike) check the request's origin (scheme, host, port) before a byte is
sent: anything but https to the rig's own host and port is refused, whatever pointed there (an
@odata.id, Links.Sessions, a member, a Location header, a redirect). The credentials (Basic
or the session token) are on that session only, so they reach the BMC's origin and nothing
else; sushy's public connector (registries it fetches from their publishers) is a session of
the same kind without credentials, refused elsewhere too. A redirect is refused before
requests follows it unless it stays on the origin. Every response body is read while it
streams up to a cap (BODY_CAP) and a deadline: a BMC cannot fill the controller's memory.
A BMC certificate pinned by its SHA-256 fingerprint (bmc.fingerprint) is checked by urllib3
on every connection (assert_fingerprint); the CA chain and host name are then not what is
trusted, the pinned certificate is.
"""
import time
from urllib.parse import urljoin, urlsplit

import requests
from requests.adapters import HTTPAdapter

from krig.safeio import printable
from rigs.ipmi.bmc import BmcAuthError
from rigs.ipmi.spec import host_key, url_host

BODY_CAP = 8 << 20          # bytes of one response body (a log service's entries fit many times over)
MAX_REDIRECTS = 5


class BmcRefused(BmcAuthError):
    """The BMC pointed krig at another origin or sent too much: nothing was sent there, and the
    BMC is not asked again (as after a refused login)."""


def bmc_url(host: str, port: int) -> str:
    return f"https://{url_host(host)}:{port}"


def origin_of(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of a URL, the default port filled in; None for what is no URL."""
    try:
        u = urlsplit(url)
        port = u.port or {"https": 443, "http": 80}.get(u.scheme.lower())
    except ValueError:
        return None
    if not u.hostname or port is None:
        return None
    return u.scheme.lower(), host_key(u.hostname), port


class BmcAdapter(HTTPAdapter):
    """The transport of every request to the BMC: the origin checked before sending, the body
    read within BODY_CAP and `deadline` seconds, a redirect elsewhere refused."""

    def __init__(self, url: str, where: str, fingerprint: str | None = None, cap: int = BODY_CAP,
                 deadline: float = 60):
        """url: the BMC's own (https://HOST:PORT); where: how errors name the BMC (`rig NAME: BMC URL`)."""
        self.url, self.origin, self.where = url, origin_of(url), where
        self.fingerprint, self.cap, self.deadline = fingerprint, cap, deadline
        self.refused: str | None = None     # the first refusal's line, kept (sushy swallows some errors)
        super().__init__(max_retries=0)

    def init_poolmanager(self, *args, **kwargs):
        if self.fingerprint:
            kwargs["assert_fingerprint"] = self.fingerprint
        return super().init_poolmanager(*args, **kwargs)

    def _refuse(self, line: str):
        self.refused = self.refused or line
        raise BmcRefused(line)

    def check(self, url: str, what: str) -> None:
        if origin_of(url) != self.origin:
            self._refuse(f"{self.where} {what} {printable(url, 200)}, not the BMC's own origin {self.url}: "
                         "refused, nothing sent there (krig talks to the BMC's origin over TLS only)")

    def send(self, request, stream=False, timeout=None, verify=True, cert=None, proxies=None):
        self.check(request.url, f"links to {request.method}")
        r = super().send(request, stream=True, timeout=timeout, verify=verify, cert=cert, proxies=proxies)
        try:
            self._read(r)
        except BaseException:
            r.close()
            raise
        if r.is_redirect:
            self.check(urljoin(request.url, r.headers.get("Location", "")),
                       f"redirects {request.method} {printable(urlsplit(request.url).path, 80)} to")
        return r

    def _read(self, r) -> None:
        """The whole body into r (as requests would), refused past the cap or the deadline."""
        said = r.headers.get("Content-Length", "")
        if said.isdigit() and int(said) > self.cap:
            self._refuse(f"{self.where} answered {printable(urlsplit(r.url).path, 80)} with {int(said)} bytes "
                         f"(Content-Length), over the {self.cap >> 20} MiB krig reads from a BMC; refused unread")
        chunks, n, end = [], 0, time.monotonic() + self.deadline
        for chunk in r.iter_content(64 << 10):
            n += len(chunk)
            if n > self.cap:
                self._refuse(f"{self.where} sent more than {self.cap >> 20} MiB for "
                             f"{printable(urlsplit(r.url).path, 80)}; refused after {n} bytes")
            if time.monotonic() > end:
                self._refuse(f"{self.where} took over {self.deadline:.0f}s to send "
                             f"{printable(urlsplit(r.url).path, 80)}; refused after {n} bytes")
            chunks.append(chunk)
        r._content = b"".join(chunks)


def guarded_session(adapter: BmcAdapter) -> requests.Session:
    """A requests Session whose every request, on any scheme, goes through adapter."""
    s = requests.Session()
    s.mount("https://", adapter)
    s.mount("http://", adapter)
    s.max_redirects = MAX_REDIRECTS
    s.headers["Connection"] = "close"       # as sushy's own: BMCs choke on long-lived connections
    return s


def guard(connector, url: str, where: str, fingerprint: str | None, deadline: float) -> BmcAdapter:
    """A sushy Connector's session replaced by a guarded one for the BMC at url; the adapter
    returned holds the first refusal (adapter.refused)."""
    adapter = BmcAdapter(url, where, fingerprint, deadline=deadline)
    connector._session.close()
    connector._session = guarded_session(adapter)
    return adapter


def public_session(url: str, where: str, fingerprint: str | None, deadline: float) -> requests.Session:
    """sushy's public connector: no credentials, and no origin but the BMC's either."""
    return guarded_session(BmcAdapter(url, where, fingerprint, deadline=deadline))

"""A BMC's TLS certificate pinned by its SHA-256 fingerprint: BMCs mostly present a
self-signed certificate no CA signed, and the rig file then pins it (bmc.fingerprint)
instead of trusting it unseen. urllib3 checks the fingerprint of the certificate on every
connection (assert_fingerprint) and refuses any other; the CA chain and host name are then
not what is trusted, the pinned certificate is."""
from requests.adapters import HTTPAdapter


class PinnedAdapter(HTTPAdapter):
    def __init__(self, fingerprint: str):
        self.fingerprint = fingerprint
        super().__init__(max_retries=0)

    def init_poolmanager(self, *args, **kwargs):
        kwargs["assert_fingerprint"] = self.fingerprint
        return super().init_poolmanager(*args, **kwargs)


def pin(connector, fingerprint: str) -> None:
    """Every HTTPS request of a sushy Connector (made with verify=False) checks the fingerprint."""
    connector._session.mount("https://", PinnedAdapter(fingerprint))

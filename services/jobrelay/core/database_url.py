"""The forms of ``JOBRELAY_DATABASE_URL``, one host or several (a primary and its standbys).

libpq names several hosts in the netloc (``postgresql://u:p@h1:5432,h2:5433/db``) and tries them
in turn, ``target_session_attrs=read-write`` skipping any server in recovery. SQLAlchemy cannot
parse that netloc (its port becomes ``int("5432,h2:5433")``); its psycopg dialect takes the same
hosts as query parameters instead (``postgresql+psycopg://u:p@/db?host=h1:5432&host=h2:5433``)
and hands them back to libpq as ``host=h1,h2 port=5432,5433``. ``sqlalchemy_form`` and
``libpq_form`` turn either form into the other; user, password, path and every other query
parameter are kept byte for byte (their percent-encoding included). A URL that is not one of
them is a ValueError naming the fault, never the URL (it holds the password).
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass, replace

# ``user[:password]@`` (a raw "@" in a password is written %40), the hosts, the path, the query.
_URL = re.compile(
    r"^(?:(?P<userinfo>[^@/?#]*(?::[^@]*)?)@)?(?P<hosts>[^/?#]*)(?P<path>/[^?#]*)?"
    r"(?:\?(?P<query>[^#]*))?(?:#.*)?$",
    re.DOTALL,
)
# One netloc entry: ``host``, ``host:port``, ``[v6]``, ``[v6]:port`` (port may be empty).
_HOST = re.compile(r"^(?:\[(?P<v6>[^\]]*)\]|(?P<name>[^:\[\]]*))(?::(?P<port>[^:]*))?$")
# SQLAlchemy's reading of one ``host=`` value as ``host:port`` (dialects/postgresql/base.py).
_HOST_PORT = re.compile(r"^([a-zA-Z0-9\-\.]*):(\d*)$")
_QUERY_HOST_KEYS = ("host", "port")


@dataclass(frozen=True)
class Host:
    """One server: ``name`` decoded (a socket directory is ``/run/postgresql``), ``port`` the
    digits as written or "" for the default."""

    name: str
    port: str = ""

    def netloc(self) -> str:
        name = f"[{self.name}]" if ":" in self.name else urllib.parse.quote(self.name, safe="")
        return f"{name}:{self.port}" if self.port else name


@dataclass(frozen=True)
class DatabaseUrl:
    """A PostgreSQL URL in pieces; ``userinfo``, ``path`` and ``query`` as written."""

    userinfo: str | None
    hosts: tuple[Host, ...]
    path: str
    query: tuple[tuple[str, str], ...]

    def render(self, scheme: str) -> str:
        userinfo = "" if self.userinfo is None else f"{self.userinfo}@"
        netloc = ",".join(host.netloc() for host in self.hosts)
        query = "&".join(f"{key}={value}" if value else key for key, value in self.query)
        return f"{scheme}://{userinfo}{netloc}{self.path}" + (f"?{query}" if query else "")

    def query_values(self, key: str) -> list[str]:
        return [urllib.parse.unquote_plus(value) for name, value in self.query if name == key]

    def without_query_hosts(self) -> tuple[tuple[str, str], ...]:
        return tuple(pair for pair in self.query if pair[0] not in _QUERY_HOST_KEYS)

    @property
    def password(self) -> str | None:
        if self.userinfo is None or ":" not in self.userinfo:
            return None
        return urllib.parse.unquote(self.userinfo.partition(":")[2])


def parse(rest: str) -> DatabaseUrl:
    """The URL after its ``scheme://``, or a ValueError that never shows it."""
    match = _URL.match(rest)
    if match is None:
        raise ValueError("the database URL cannot be parsed (a raw '@' in a password is %40)")
    entries = match["hosts"].split(",") if match["hosts"] else []
    hosts = tuple(_host(entry, position, len(entries)) for position, entry in enumerate(entries))
    query = tuple(
        (key, value) for key, _, value in (p.partition("=") for p in _pairs(match["query"]))
    )
    url = DatabaseUrl(match["userinfo"], hosts, match["path"] or "", query)
    if hosts and url.query_values("host"):
        raise ValueError(
            "the database URL names hosts twice, before the path and in ?host=: use one"
        )
    _check_query_hosts(url)
    return url


def read_write_by_default(url: DatabaseUrl) -> DatabaseUrl:
    """Several hosts without ``target_session_attrs``: ``read-write`` added. libpq's default
    (``any``) takes the first server that answers, a standby in recovery included, where every
    write fails; ``target_session_attrs=any`` written out keeps libpq's choice."""
    if url.query_values("target_session_attrs") or _host_count(url) < 2:
        return url
    return replace(url, query=(*url.query, ("target_session_attrs", "read-write")))


def _host_count(url: DatabaseUrl) -> int:
    return len(url.hosts) or sum(len(value.split(",")) for value in url.query_values("host"))


def sqlalchemy_form(url: DatabaseUrl) -> DatabaseUrl:
    """The URL as SQLAlchemy parses it: several netloc hosts move into ``?host=h:p`` (one
    parameter each, SQLAlchemy's own form), or into ``?host=h1,h2&port=p1,p2`` when one of
    them is an IPv6 address (whose colons the first form cannot carry). One host stays put."""
    if len(url.hosts) < 2:
        return url
    if any(":" in host.name for host in url.hosts):
        names = ",".join(_query_value(host.name) for host in url.hosts)
        ports = ",".join(host.port for host in url.hosts)
        moved: tuple[tuple[str, str], ...] = (("host", names), ("port", ports))
    else:
        moved = tuple(("host", _query_value(_joined(host))) for host in url.hosts)
    return replace(url, hosts=(), query=moved + url.query)


def libpq_form(url: DatabaseUrl) -> DatabaseUrl:
    """The URL as libpq parses it: SQLAlchemy's ``?host=h:p`` parameters (libpq keeps only the
    last ``host=`` and would read ``h:p`` as a host name) move back into the netloc. libpq
    reads ``?host=h1,h2&port=p1,p2`` and ``?host=/socket/dir`` itself: they stay."""
    if url.hosts or not _is_sqlalchemy_multihost(url):
        return url
    hosts = tuple(_split_host_port(value) for value in url.query_values("host"))
    return replace(url, hosts=hosts, query=url.without_query_hosts())


def _is_sqlalchemy_multihost(url: DatabaseUrl) -> bool:
    values = url.query_values("host")
    if not values or url.query_values("port"):
        return False
    return len(values) > 1 or _HOST_PORT.match(values[0]) is not None


def _check_query_hosts(url: DatabaseUrl) -> None:
    """SQLAlchemy's own complaints about ``?host=``, as ValueErrors that say what to write."""
    values = url.query_values("host")
    if len(values) < 2:
        return
    if url.query_values("port"):
        raise ValueError(
            "the database URL mixes ?host=h1:p1&host=h2:p2 with ?port=: write the port with "
            "each host"
        )
    for position, value in enumerate(values):
        if not value or (":" in value and _HOST_PORT.match(value) is None):
            raise ValueError(
                f"host {position + 1} of {len(values)} in ?host= is not HOST or HOST:PORT"
            )
        _check_port(_split_host_port(value).port, position, len(values))


def _host(entry: str, position: int, count: int) -> Host:
    label = f"host {position + 1} of {count}" if count > 1 else "the host"
    match = _HOST.match(entry)
    if match is None or not (match["v6"] or match["name"]):
        raise ValueError(
            f"{label} of the database URL is empty or malformed; write "
            "HOST:PORT,HOST:PORT (an IPv6 address in brackets)"
        )
    port = match["port"] or ""
    _check_port(port, position, count)
    return Host(match["v6"] or urllib.parse.unquote(match["name"]), port)


def _check_port(port: str, position: int, count: int) -> None:
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        label = f"host {position + 1} of {count}" if count > 1 else "the host"
        raise ValueError(f"{label} of the database URL has a port that is not 1-65535")


def _split_host_port(value: str) -> Host:
    match = _HOST_PORT.match(value)
    return Host(match[1], match[2]) if match else Host(value)


def _pairs(query: str | None) -> list[str]:
    return [pair for pair in (query or "").split("&") if pair]


def _joined(host: Host) -> str:
    return f"{host.name}:{host.port}" if host.port else host.name


def _query_value(value: str) -> str:
    return urllib.parse.quote(value, safe="/:,")

"""A RabbitMQ cluster's nodes in network namespaces of this machine, and partitions between them
(`up --rabbitmq-netns`, docs/cluster.md "Partitions").

Node N lives in namespace jr-rmqN with the address 10.203.0.1N on a veth whose other end is a
port of the bridge jrbr0 (10.203.0.1, in the root namespace, where the services and tests run).
Nothing else is touched: no other interface, no route, and one rule of the root namespace only,
letting the bridge's own traffic through its FORWARD chain (Docker may set that chain's policy
to DROP, and bridged packets pass it where br_netfilter is loaded). Each namespace has its own
loopback, hence its own epmd on port 4369.

A partition is a set of grudges, as in Jepsen: node N drops every packet it receives from the
nodes it holds a grudge against, by an nftables table (`inet jobrelay_partition`) in its own
namespace. A symmetric cut is a grudge each way. Healing deletes those tables.

The names (namespaces, bridge, addresses) are fixed: one such cluster per machine at a time. A
leftover of a killed run is removed before the next one starts. Root only (iproute2, nftables).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Mapping
from pathlib import Path

from .common import ServerError, kill_and_wait, log, run

BRIDGE = "jrbr0"
BRIDGE_ADDRESS = "10.203.0.1"
PREFIX_LENGTH = 24
NAMESPACE_PREFIX = "jr-rmq"
PARTITION_TABLE = "jobrelay_partition"
FORWARD_BRIDGED = ["FORWARD", "-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT"]  # see netns_up


def namespace(number: int) -> str:
    return f"{NAMESPACE_PREFIX}{number}"


def node_address(number: int) -> str:
    """Node `number`'s address (1 to 9): 10.203.0.11, 10.203.0.12, ..."""
    return f"10.203.0.1{number}"


def host_veth(number: int) -> str:
    return f"{namespace(number)}-h"


def in_namespace(number: int, command: list[str]) -> list[str]:
    """`command` run inside node `number`'s namespace."""
    return ["ip", "netns", "exec", namespace(number), *command]


def require_tools() -> None:
    """Root, iproute2 and nftables: a clear error otherwise (never a half-made network)."""
    if os.geteuid() != 0:
        raise ServerError("--rabbitmq-netns needs root (ip netns add, nft)")
    missing = [tool for tool in ("ip", "nft") if shutil.which(tool) is None]
    if missing:
        raise ServerError(f"--rabbitmq-netns needs {' and '.join(missing)} (iproute2, nftables)")


def existing_namespaces() -> list[str]:
    """Our namespaces that exist (a leftover, or the running cluster's)."""
    listed = run(["ip", "netns", "list"]).stdout.split()
    return [name for name in listed if name.startswith(NAMESPACE_PREFIX)]


def netns_up(nodes: int, mnesia: Path) -> None:
    """The bridge and one namespace per node, afresh (a leftover of a killed run removed; the
    live cluster of another servers dir, whose data is not in `mnesia`, is an error)."""
    require_tools()
    if other := _other_owner(mnesia):
        raise ServerError(
            f"the network namespaces {NAMESPACE_PREFIX}N hold the RabbitMQ cluster of {other}: "
            "one such cluster per machine (stop it with its scripts/servers.py down)"
        )
    netns_down()
    log(f"network namespaces for {nodes} RabbitMQ nodes on bridge {BRIDGE} ({BRIDGE_ADDRESS})")
    run(["ip", "link", "add", BRIDGE, "type", "bridge"])
    run(["ip", "addr", "add", f"{BRIDGE_ADDRESS}/{PREFIX_LENGTH}", "dev", BRIDGE])
    run(["ip", "link", "set", BRIDGE, "up"])
    _let_bridged_traffic_pass()
    for number in range(1, nodes + 1):
        name = namespace(number)
        run(["ip", "netns", "add", name])
        run(["ip", "link", "add", host_veth(number), "type", "veth", "peer", "eth0", "netns", name])
        run(["ip", "link", "set", host_veth(number), "master", BRIDGE, "up"])
        inside = ["ip", "-n", name]
        run([*inside, "addr", "add", f"{node_address(number)}/{PREFIX_LENGTH}", "dev", "eth0"])
        run([*inside, "link", "set", "eth0", "up"])
        run([*inside, "link", "set", "lo", "up"])


def netns_down() -> None:
    """Every process left in our namespaces killed (epmd among them), then the namespaces (their
    veths and nftables tables go with them) and the bridge deleted. Nothing to do if none
    exists."""
    if shutil.which("ip") is None:
        return
    for name in existing_namespaces():
        pids = [int(pid) for pid in run(["ip", "netns", "pids", name]).stdout.split()]
        kill_and_wait(pids, timeout=0, first=signal.SIGKILL)
        run(["ip", "netns", "delete", name])
    if run(["ip", "link", "show", BRIDGE], check=False).returncode == 0:
        run(["ip", "link", "delete", BRIDGE])
    if shutil.which("iptables") is not None:
        while run(["iptables", "-D", *FORWARD_BRIDGED], check=False).returncode == 0:
            pass  # inserted once per up; a killed run's too


def _let_bridged_traffic_pass() -> None:
    """Node to node traffic crosses the bridge, and where br_netfilter is loaded (Docker loads
    it) bridged packets pass the root namespace's FORWARD chain, whose policy Docker may set to
    DROP: one rule lets the bridge's own traffic through (removed by `netns_down`)."""
    if shutil.which("iptables") is None:
        return  # no iptables, no FORWARD policy of its making
    if run(["iptables", "-C", *FORWARD_BRIDGED], check=False).returncode != 0:
        run(["iptables", "-I", *FORWARD_BRIDGED])


def _other_owner(mnesia: Path) -> str | None:
    """The data dir of a RabbitMQ node running in our namespaces that is not `mnesia` (a
    leftover epmd does not count: it is no one's cluster)."""
    needle = b"RABBITMQ_MNESIA_BASE="
    for name in existing_namespaces():
        for pid in run(["ip", "netns", "pids", name]).stdout.split():
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/comm").read_text().strip() == "epmd":
                    continue
                for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                    if entry.startswith(needle) and entry[len(needle) :] != bytes(mnesia):
                        return entry[len(needle) :].decode(errors="replace")
    return None


# --- partitions ---------------------------------------------------------------------------------


def partition(grudges: Mapping[int, set[int] | frozenset[int]], nodes: int) -> None:
    """Node n drops what it receives from each node of grudges[n] (and nothing else); a node
    without a grudge keeps hearing everyone. Replaces any partition in place."""
    for number in range(1, nodes + 1):
        senders = sorted(grudges.get(number, ()))
        _drop_table(number)
        if senders:
            _apply(number, _table(senders))


def heal(nodes: int) -> None:
    """Every node hears every other again."""
    for number in range(1, nodes + 1):
        _drop_table(number)


def _table(senders: list[int]) -> str:
    addresses = ", ".join(node_address(sender) for sender in senders)
    return (
        f"table inet {PARTITION_TABLE} {{\n"
        "  chain input {\n"
        "    type filter hook input priority 0; policy accept;\n"
        f"    ip saddr {{ {addresses} }} drop\n"
        "  }\n"
        "}\n"
    )


def _apply(number: int, ruleset: str) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".nft") as file:
        file.write(ruleset)
        file.flush()
        run(in_namespace(number, ["nft", "-f", file.name]))


def _drop_table(number: int) -> None:
    command = in_namespace(number, ["nft", "delete", "table", "inet", PARTITION_TABLE])
    run(command, check=False)  # fails when there is none: nothing to heal

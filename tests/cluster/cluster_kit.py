"""The cluster of the cluster tests: started, faulted and healed through ``scripts/servers.py``
(as a user and the chaos runner would), and read through the management API of a node that
answers.

Faults are the script's: ``rabbit-stop-app N``, ``rabbit-kill N`` (SIGKILL of beam.smp),
``rabbit-pause N`` (SIGSTOP), and their remedies ``rabbit-start-app N``, ``rabbit-start N``,
``rabbit-resume N``.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.processes import ROOT
from tests.support.servers import management_request, vhost_amqp_url

SCRIPT = ROOT / "scripts" / "servers.py"
NODES = 3
# The services' heartbeat on the cluster's URLs: a frozen (SIGSTOPped) node is left after about
# three of them (docs/cluster.md); the 60 s default would take three minutes.
HEARTBEAT_SECONDS = 5
HEAL_SECONDS = 120.0


class ClusterError(Exception):
    pass


@dataclass(frozen=True)
class Node:
    number: int
    name: str
    amqp_port: int
    api_url: str


@dataclass(frozen=True)
class Cluster:
    base: Path  # its scripts/servers.py directory
    nodes: tuple[Node, ...]
    owned: bool  # started for the session (deleted at its end)

    # --- starting and stopping ----------------------------------------------------------------

    @classmethod
    def from_environment(cls) -> Cluster | None:
        """The cluster ``scripts/servers.py`` runs for the whole suite, if it runs one."""
        described = os.environ.get("JOBRELAY_RABBITMQ_CLUSTER")
        base = os.environ.get("JOBRELAY_SERVERS_DIR")
        if not described or not base:
            return None
        nodes = _nodes(described)
        return cls(Path(base), nodes, owned=False) if len(nodes) >= NODES else None

    @classmethod
    def start(cls, base: Path, count: int) -> Cluster:
        """``scripts/servers.py up --rabbitmq-nodes COUNT`` in ``base``."""
        started = servers_command(base, "up", "--rabbitmq-nodes", str(count), timeout=300)
        if started.returncode != 0:
            raise ClusterError(started.stderr.strip()[-2000:])
        exports = exported(started.stdout)
        return cls(base, _nodes(exports["JOBRELAY_RABBITMQ_CLUSTER"]), owned=True)

    def environment(self) -> dict[str, str]:
        """The JOBRELAY_* variables ``scripts/servers.py env`` exports for these servers."""
        printed = servers_command(self.base, "env")
        if printed.returncode != 0:
            raise ClusterError(printed.stderr.strip())
        return exported(printed.stdout)

    def delete(self) -> None:
        if self.owned:
            servers_command(self.base, "down", "--delete-data", timeout=120)

    # --- faults -------------------------------------------------------------------------------

    def fault(self, command: str, node: int) -> None:
        """``scripts/servers.py COMMAND N`` (rabbit-stop-app, rabbit-kill, rabbit-pause, ...)."""
        done = servers_command(self.base, command, str(node), timeout=HEAL_SECONDS)
        assert done.returncode == 0, f"servers.py {command} {node}: {done.stderr.strip()}"

    def ctl(self, node: int, *args: str) -> str:
        done = servers_command(self.base, "rabbitmqctl", "--node", str(node), *args)
        assert done.returncode == 0, f"rabbitmqctl {args}: {done.stderr.strip()}"
        return done.stdout

    def status(self) -> dict[int, str]:
        """Node number → its state as ``scripts/servers.py status`` prints it."""
        printed = servers_command(self.base, "status").stdout
        found: dict[int, str] = {}
        for line in printed.splitlines():
            name, _, state = line.partition(": ")
            if name.startswith("rabbitmq-"):
                found[int(name.removeprefix("rabbitmq-"))] = state
        return found

    def heal(self) -> None:
        """Bring every node back (resume, start_app or start, as each needs) and wait until
        node 1 sees them all running."""
        states = self.status()
        for number, state in states.items():
            if "paused" in state:
                self.fault("rabbit-resume", number)
            elif "not serving" in state:
                self.fault("rabbit-start-app", number)
            elif state.startswith("stopped"):
                self.fault("rabbit-start", number)
        cut_off = {n: state.count("@") - 1 for n, state in states.items() if "partitioned" in state}
        if cut_off:  # the node cut off from the most others rejoins them
            self.fault("rabbit-restart-app", max(cut_off, key=lambda n: cut_off[n]))
        deadline = time.monotonic() + HEAL_SECONDS
        while not self.whole():
            assert time.monotonic() < deadline, f"the cluster did not heal: {self.status()}"
            time.sleep(0.5)

    def whole(self) -> bool:
        states = self.status()
        if not all(state.startswith("running") for state in states.values()):
            return False
        running = self.running_nodes(1)
        return running == {node.name for node in self.nodes}

    # --- reading ------------------------------------------------------------------------------

    def node(self, number: int) -> Node:
        return self.nodes[number - 1]

    def api_url(self, number: int = 1) -> str:
        return self.node(number).api_url

    def amqp_url(self, vhost: str) -> str:
        """Every node's URL on ``vhost``, node 1 first, with the tests' heartbeat."""
        return ",".join(
            vhost_amqp_url(f"amqp://guest:guest@127.0.0.1:{node.amqp_port}/", vhost)
            + f"?heartbeat={HEARTBEAT_SECONDS}"
            for node in self.nodes
        )

    def running_nodes(self, via: int) -> set[str]:
        """The nodes node ``via`` sees running in its cluster."""
        found = management_request(self.api_url(via), "GET", "/api/nodes") or []
        return {entry["name"] for entry in found if entry.get("running")}

    def queue(self, vhost: str, name: str, via: int) -> dict[str, Any]:
        """The management API's view of a queue (members, leader, arguments)."""
        path = f"/api/queues/{_quoted(vhost)}/{_quoted(name)}"
        found = management_request(self.api_url(via), "GET", path)
        assert isinstance(found, dict)
        return found

    def connected_to(self, vhost: str, connection_name: str, via: int) -> set[str]:
        """The nodes the connections called ``connection_name`` on ``vhost`` are on."""
        path = f"/api/vhosts/{_quoted(vhost)}/connections"
        found = management_request(self.api_url(via), "GET", path) or []
        return {
            entry["node"]
            for entry in found
            if (entry.get("client_properties") or {}).get("connection_name") == connection_name
        }

    def number_of(self, name: str) -> int:
        return next(node.number for node in self.nodes if node.name == name)


def exported(printed: str) -> dict[str, str]:
    """The variables of ``export NAME=VALUE`` lines, as ``scripts/servers.py`` prints them."""
    return dict(
        word.split("=", 1)
        for line in printed.splitlines()
        for word in shlex.split(line)[1:2]
        if "=" in word
    )


def _nodes(described: str) -> tuple[Node, ...]:
    return tuple(
        Node(entry["number"], entry["name"], entry["amqp_port"], entry["api_url"])
        for entry in json.loads(described)
    )


def _quoted(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def servers_command(
    base: Path, *args: str, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``scripts/servers.py ARGS`` on the servers of ``base``, with none of this process's
    JOBRELAY_* variables (``env`` adds some)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("JOBRELAY_")}
    environment |= {**(env or {}), "JOBRELAY_SERVERS_DIR": str(base)}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )

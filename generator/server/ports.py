"""Free TCP ports on loopback for servers this project starts (the embedded Triton takes fixed ports, not 0).

One helper for the code, the tools and the tests. Ports handed out by this process are never handed out again
by it: the kernel may offer a port that was just closed, and a server given one port for two protocols does not
start. A port is free when it is handed out; another process may still take it before the server binds it.
"""

from __future__ import annotations

import socket
import threading

_HANDED_OUT: set[int] = set()
_LOCK = threading.Lock()


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports free on ``host`` now (all bound at once, so the kernel gives distinct ones)."""
    with _LOCK:
        found: list[int] = []
        while len(found) < count:
            sockets = [socket.socket() for _ in range(count - len(found))]
            try:
                for sock in sockets:
                    sock.bind((host, 0))
                ports = [int(sock.getsockname()[1]) for sock in sockets]
            finally:
                for sock in sockets:
                    sock.close()
            found += [p for p in ports if p not in _HANDED_OUT]
        _HANDED_OUT.update(found)
        return found


def free_port(host: str = "127.0.0.1") -> int:
    """One port free on ``host`` now, not handed out before by this process."""
    return free_ports(1, host)[0]

"""A fault-injecting TCP proxy for the Raft links between nodes.

Every directed link i->j (node i's Raft client connecting to node j's Raft
server) gets its own listening port: node i is started with a --peers string
in which node j's raft address is 127.0.0.1:P_ij, and the proxy forwards
P_ij to j's real Raft port. Because raftlog's gRPC transport sends i's
messages to j only over i's connection to j, blocking link i->j drops exactly
the messages from i to j; a full partition of i and j blocks both directions.

A blocked link aborts its open connections (RST) and closes every new one at
once; healing lets new connections through (the transport reconnects within
its 1 s back-off).

The proxy runs as its own process (`python -m chaos.proxy CONFIG_JSON`),
so forwarding does not compete with the campaign's clients for the GIL; it is
driven by lines on stdin and answers each with one line on stdout:
    block 1-2 2-1     block these directed links
    heal 1-2          heal these links;  `heal` alone heals everything
    status            JSON {link: {"blocked": bool, "connections": n, "bytes": n}}
    quit
ProxyControl starts and drives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import threading


class _Link:
    def __init__(self, name: str, listen_port: int, target_port: int) -> None:
        self.name = name
        self.listen_port = listen_port
        self.target_port = target_port
        self.blocked = False
        self.conns: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self.bytes = 0
        self.refused = 0

    def abort_all(self) -> None:
        for a, b in list(self.conns):
            for w in (a, b):
                with contextlib.suppress(Exception):
                    w.transport.abort()
        self.conns.clear()


class ProxyServer:
    def __init__(self, links: dict[str, tuple[int, int]]) -> None:
        self.links = {name: _Link(name, lp, tp) for name, (lp, tp) in links.items()}
        self.servers: list[asyncio.base_events.Server] = []

    async def start(self) -> None:
        for link in self.links.values():
            server = await asyncio.start_server(
                lambda r, w, link=link: self._handle(link, r, w), "127.0.0.1", link.listen_port
            )
            self.servers.append(server)

    async def _handle(
        self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if link.blocked:
            link.refused += 1
            writer.transport.abort()
            return
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", link.target_port)
        except OSError:
            writer.transport.abort()
            return
        if link.blocked:  # blocked while connecting
            writer.transport.abort()
            up_w.transport.abort()
            return
        pair = (writer, up_w)
        link.conns.add(pair)

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while True:
                    data = await src.read(65536)
                    if not data:
                        break
                    if link.blocked:
                        break
                    link.bytes += len(data)
                    dst.write(data)
                    await dst.drain()
            except (OSError, ConnectionError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    dst.transport.abort() if link.blocked else dst.close()

        await asyncio.gather(pump(reader, up_w), pump(up_r, writer))
        link.conns.discard(pair)

    def command(self, line: str) -> str:
        words = line.split()
        if not words:
            return "error empty command"
        cmd, args = words[0], words[1:]
        unknown = [a for a in args if a not in self.links]
        if unknown:
            return f"error unknown links {unknown}"
        if cmd == "block":
            for a in args:
                link = self.links[a]
                link.blocked = True
                link.abort_all()
            return "ok"
        if cmd == "heal":
            for a in args or list(self.links):
                self.links[a].blocked = False
            return "ok"
        if cmd == "status":
            return json.dumps(
                {
                    n: {
                        "blocked": link.blocked,
                        "connections": len(link.conns),
                        "bytes": link.bytes,
                        "refused": link.refused,
                    }
                    for n, link in self.links.items()
                }
            )
        return f"error unknown command {cmd!r}"


async def _main(config: dict) -> None:
    server = ProxyServer({k: tuple(v) for k, v in config["links"].items()})
    await server.start()
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[str | None] = asyncio.Queue()

    def read_stdin() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(lines.put_nowait, line)
        loop.call_soon_threadsafe(lines.put_nowait, None)

    threading.Thread(target=read_stdin, daemon=True).start()
    print("ready", flush=True)
    while True:
        line = await lines.get()
        if line is None or line.strip() == "quit":
            break
        print(server.command(line), flush=True)


class ProxyControl:
    """Starts the proxy process and sends it commands (thread-safe)."""

    def __init__(self, links: dict[str, tuple[int, int]], log_path: str | None = None) -> None:
        self.links = links
        self._lock = threading.Lock()
        err = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "chaos.proxy", json.dumps({"links": links})],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            start_new_session=True,
        )
        ready = self.proc.stdout.readline().strip()
        if ready != "ready":
            raise RuntimeError(f"proxy did not start: {ready!r}")

    def _send(self, line: str) -> str:
        with self._lock:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
            reply = self.proc.stdout.readline().strip()
        if reply.startswith("error"):
            raise RuntimeError(f"proxy: {reply} (command {line!r})")
        return reply

    def block(self, links: list[str]) -> None:
        if links:
            self._send("block " + " ".join(links))

    def heal(self, links: list[str] | None = None) -> None:
        self._send("heal " + " ".join(links or []))

    def status(self) -> dict:
        return json.loads(self._send("status"))

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=5)
            except Exception:
                self.proc.kill()
                self.proc.wait()


if __name__ == "__main__":
    asyncio.run(_main(json.loads(sys.argv[1])))

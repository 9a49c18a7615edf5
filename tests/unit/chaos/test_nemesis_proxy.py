"""The seeded schedule is reproducible and fair; the proxy blocks and heals links."""

from __future__ import annotations

import itertools
import socket
import threading

from chaos.nemesis import KINDS, ScheduleOptions, make_schedule, schedule_json
from chaos.proxy import ProxyControl
from raftlog.process_cluster import free_ports


def test_schedule_is_a_function_of_the_seed():
    opts = ScheduleOptions(duration_s=300)
    a, b, c = make_schedule(7, opts), make_schedule(7, opts), make_schedule(8, opts)
    print("seed 7:", [f.describe() for f in a])
    assert schedule_json(a) == schedule_json(b)
    assert schedule_json(a) != schedule_json(c)


def test_schedule_deals_every_kind_evenly_and_fits():
    opts = ScheduleOptions(duration_s=120, fault_min_s=3, fault_max_s=6, gap_min_s=2, gap_max_s=4)
    for seed in range(20):
        sched = make_schedule(seed, opts)
        counts = {k: sum(f.kind == k for f in sched) for k in opts.kinds}
        assert max(counts.values()) - min(counts.values()) <= 1, (seed, counts)
        assert min(counts.values()) >= 2, (seed, counts)
        assert sched[0].start >= opts.warmup_s
        assert sched[-1].start + sched[-1].duration <= opts.duration_s - opts.cooldown_s
        for f, g in itertools.pairwise(sched):
            assert g.start >= f.start + f.duration + opts.gap_min_s - 0.01


def test_schedule_with_chosen_kinds_only():
    sched = make_schedule(3, ScheduleOptions(duration_s=60, kinds=("pause",)))
    assert sched and {f.kind for f in sched} == {"pause"}


def _echo_server() -> tuple[socket.socket, int]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return

            def echo(conn=conn) -> None:
                with conn:
                    while data := conn.recv(4096):
                        conn.sendall(data)

            threading.Thread(target=echo, daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return srv, srv.getsockname()[1]


def _roundtrip(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(b"ping")
            return s.recv(4) == b"ping"
    except OSError:
        return False


def test_proxy_blocks_and_heals_a_link():
    srv, target = _echo_server()
    (listen,) = free_ports(1)
    proxy = ProxyControl({"1-2": (listen, target)})
    try:
        assert _roundtrip(listen)
        held = socket.create_connection(("127.0.0.1", listen), timeout=2)
        held.sendall(b"x")
        assert held.recv(1) == b"x"
        proxy.block(["1-2"])
        assert not _roundtrip(listen), "a blocked link must refuse new connections"
        held.settimeout(2)
        try:
            gone = held.recv(1) == b""
        except OSError:
            gone = True
        assert gone, "a blocked link must cut its open connections"
        held.close()
        assert proxy.status()["1-2"]["blocked"]
        proxy.heal()
        assert _roundtrip(listen)
        assert not proxy.status()["1-2"]["blocked"]
    finally:
        proxy.close()
        srv.close()


def test_cli_kinds_match_the_nemesis():
    from chaos.command import KINDS as CLI_KINDS

    assert tuple(CLI_KINDS) == KINDS

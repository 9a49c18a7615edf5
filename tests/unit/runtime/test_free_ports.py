"""free_ports: listener ports for local clusters, never handed out twice by one process
(a probe socket closes before the node binds the port) and striped across pytest-xdist
workers (two workers never race for one port)."""

from __future__ import annotations

import socket

from raftlog.process_cluster import free_ports


def test_a_port_is_never_handed_out_twice_before_it_is_bound():
    first = free_ports(200)  # not bound yet: the nodes have not started
    second = free_ports(200)
    assert len(set(first)) == 200 and not set(first) & set(second)
    for port in first + second:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # each one free


def test_each_xdist_worker_takes_its_own_stripe(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    for index in range(3):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{index}")
        assert {p % 3 for p in free_ports(50)} == {index}

"""gRPC transport: one ordered client stream per peer, batches of messages.

One transport serves every Raft group of a process: messages carry their
`group_id`, and handlers are registered per group (`register_group`), or for
all the constructor's groups at once by `start(handler)` (one group today).

Sending never blocks the caller: `send` puts messages on one of the peer's two
bounded lanes and one sender task per peer drains them into a single
MessageBatch write. The *control* lane (votes, heartbeats, every response,
TimeoutNow, ReadIndex) is drained first into each batch; the *data* lane
(AppendEntries, snapshot chunks) is bounded in messages and in bytes (by
max_message_bytes) and shared fairly by groups (lanes.FairDataLane: one FIFO
per group served round-robin; a full lane makes room by dropping the newest
messages of the group holding the most). So a busy group's appends can delay
or drop only appends, never another group's heartbeats and votes (which would
cause spurious elections), and delay another group's appends by at most one
message per busy group. Order is kept within a group's lane; Raft tolerates
reordering across lanes and groups (messages are independent and stale ones
are ignored by term/index checks).
Raft tolerates lost messages, so when a peer is down or a lane is full,
messages are dropped (counted) and `on_unreachable(peer)` tells the node to
fall back to probing. The sender reconnects with exponential back-off (50 ms
doubling to 1 s).

Receiving: each batch is decoded and validated (codec.decode_batch_known). A
message for a group not registered here (created/deleted races) is dropped
alone, counted in `stats.unknown_group_messages` and logged at most once per
10 s (routing.UNKNOWN_GROUP_LOG_INTERVAL_S); a structurally bad batch aborts that stream
with INVALID_ARGUMENT and is counted, and no handler sees it. gRPC enforces
max_message_bytes before we parse anything.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import grpc

from raftlog.core.messages import Message, MsgType
from raftlog.transport import raft_pb2 as pb
from raftlog.transport.codec import DecodeLimits, InvalidMessageError, decode_batch_known
from raftlog.transport.errors import TransportError
from raftlog.transport.lanes import FairDataLane
from raftlog.transport.routing import GroupRouter, MessageHandler, TransportStats
from raftlog.transport.security import TransportSecurity, is_tls_failure
from raftlog.transport.wire import EntryEncoder, encode_batch_bytes

log = logging.getLogger("raftlog.transport")

_SERVICE = "raftlog.Raft"
_SEND_PATH = f"/{_SERVICE}/Send"


@dataclass(frozen=True, slots=True)
class TransportOptions:
    max_message_bytes: int = 256 * 1024 * 1024
    """Largest gRPC message accepted or sent (a batch of Raft messages)."""
    max_batch_bytes: int = 8 * 1024 * 1024
    """A sender stops adding messages to one batch past this many entry bytes."""
    queue_max_messages: int = 65536
    """Bound of each per-peer send lane (control: votes, heartbeats, responses; data: appends,
    snapshot chunks; the data lane is also bounded by max_message_bytes); messages beyond it are
    dropped (Raft resends)."""
    backoff_initial_s: float = 0.05
    """First reconnect delay after a failed send to a peer; doubles per failure."""
    backoff_max_s: float = 1.0
    """Upper bound of the reconnect delay to an unreachable peer."""
    limits: DecodeLimits = field(default_factory=DecodeLimits)

    def __post_init__(self) -> None:
        if self.max_message_bytes <= 0 or self.max_batch_bytes <= 0 or self.queue_max_messages <= 0:
            raise ValueError("TransportOptions sizes must be positive")
        if not 0 < self.backoff_initial_s <= self.backoff_max_s:
            raise ValueError("TransportOptions back-off must satisfy 0 < initial <= max")


def _approx_bytes(m: Message) -> int:
    entries = getattr(m, "entries", None)
    if entries:
        return sum(len(e.data) + 32 for e in entries)
    data = getattr(m, "data", None)
    return len(data) + 64 if data else 64


# Kinds that go on the data lane; everything else is small control traffic.
_DATA_KINDS = frozenset((MsgType.APPEND, MsgType.SNAPSHOT))


class _PeerSender:
    """The two send lanes and the sender task for one peer."""

    def __init__(self, transport: GrpcTransport, peer: int, address: str) -> None:
        self.t = transport
        self.peer = peer
        self.address = address
        self.control: collections.deque[Message] = collections.deque()
        opts = transport.options
        self.data = FairDataLane(opts.queue_max_messages, opts.max_message_bytes)
        self.wakeup = asyncio.Event()
        self.task: asyncio.Task | None = None
        self.connected = False
        self.tls_warned = False

    def enqueue(self, m: Message) -> None:
        if m.type in _DATA_KINDS:
            # Bounded in messages and in bytes (one maximum gRPC message; an empty
            # lane accepts any one message), shared fairly by groups (lanes.py).
            if not self.data.offer(m, _approx_bytes(m), self._overflow):
                return
        else:
            if len(self.control) >= self.t.options.queue_max_messages:
                self._overflow()
                return
            self.control.append(m)
        self.wakeup.set()

    @property
    def data_bytes(self) -> int:
        return self.data.bytes

    def _overflow(self) -> None:
        self.t.stats.dropped_messages += 1
        self.t._report_unreachable(self.peer)

    def has_queued(self) -> bool:
        return bool(self.control or self.data)

    def clear(self) -> int:
        n = len(self.control) + self.data.clear()
        self.control.clear()
        return n

    def _take_batch(self) -> list[Message]:
        # Control first (small); then data up to max_batch_bytes, one message per
        # group in turn (a flooding group cannot push the others back). Never more
        # messages than the receiver's limits.max_messages: a longer batch would
        # be refused whole and abort the stream (a host with many groups queues
        # thousands of control messages per tick); the rest waits its turn.
        cap = self.t.options.limits.max_messages
        control = self.control
        if len(control) <= cap:
            out: list[Message] = list(control)
            control.clear()
        else:
            out = [control.popleft() for _ in range(cap)]
        self.data.take(out, cap, self.t.options.max_batch_bytes)
        return out

    async def run(self) -> None:
        opts = self.t.options
        backoff = opts.backoff_initial_s
        while not self.t._closed:
            await self.wakeup.wait()
            channel = self.t._channel(self.address)
            pending: list[Message] = []
            call = None
            try:
                # Requests are already-serialized MessageBatch bytes (wire.py).
                call = channel.stream_unary(
                    _SEND_PATH, response_deserializer=pb.SendSummary.FromString
                )()
                while not self.t._closed:
                    if not self.has_queued():
                        self.wakeup.clear()
                        await self.wakeup.wait()
                        continue
                    pending = self._take_batch()
                    await call.write(encode_batch_bytes(pending, self.t._entry_encoder))
                    self.t.stats.sent_messages += len(pending)
                    self.t.stats.sent_batches += 1
                    pending = []
                    if not self.connected:
                        self.connected = True
                        self.tls_warned = False
                        log.info("transport.connected peer=%d address=%s", self.peer, self.address)
                    backoff = opts.backoff_initial_s
            except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError) as exc:
                # With TLS, ask the call why it ended (a refused certificate hides
                # behind InvalidStateError); plaintext keeps its old, immediate path.
                secure = self.t.security is not None
                self._lost(pending, exc, await _final_details(call, exc) if secure else _short(exc))
            except asyncio.CancelledError:
                raise
            finally:
                await channel.close(grace=None)
            if self.t._closed:
                return
            # Back off before reconnecting; queued messages are dropped meanwhile
            # (they are stale by the time the peer is back, and Raft resends).
            self.t.stats.reconnects += 1
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, opts.backoff_max_s)
            self.t.stats.dropped_messages += self.clear()

    def _lost(self, pending: list[Message], exc: BaseException, details: str) -> None:
        self.t.stats.dropped_messages += len(pending)
        if self.t.security is not None and is_tls_failure(details):
            # Refused by TLS (the peer's CA is not ours, a certificate expired): loud,
            # but once per peer until a connection works again (it retries every second).
            self.t.stats.tls_failures += 1
            if not self.tls_warned:
                self.tls_warned = True
                log.warning(
                    "transport.tls_refused peer=%d address=%s error=%s",
                    self.peer,
                    self.address,
                    details,
                )
        if self.connected:
            log.info("transport.disconnected peer=%d error=%s", self.peer, _short(exc))
        self.connected = False
        self.t._report_unreachable(self.peer)


async def _final_details(call: grpc.aio.StreamUnaryCall | None, exc: BaseException) -> str:
    """Why a send stream ended: the RPC's status (a write to a finished call raises
    InvalidStateError, which says nothing; the call's own status says e.g. that the
    TLS handshake failed)."""
    if isinstance(exc, grpc.aio.AioRpcError) or call is None:
        return _short(exc)
    try:
        code = await asyncio.wait_for(call.code(), 1.0)
        return f"{code.name}: {await asyncio.wait_for(call.details(), 1.0)}"
    except Exception:  # the status is best-effort diagnostics only
        return _short(exc)


def _short(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    return repr(exc)


class GrpcTransport:
    """The Raft transport of one node over gRPC (grpc.aio).

    peers: node id -> "host:port" of every OTHER node (this node's own address
    is `listen`). groups: the Raft group ids `start(handler)` registers handler
    for; more are added and removed with register_group / unregister_group.
    Messages for any other group are dropped one by one (and counted).
    """

    def __init__(
        self,
        node_id: int,
        listen: str,
        peers: dict[int, str],
        groups: Iterable[int] = (0,),
        options: TransportOptions | None = None,
        security: TransportSecurity | None = None,
    ) -> None:
        """security: mutual TLS credentials (raftlog.transport.security); None: plaintext."""
        if node_id in peers:
            raise ValueError("peers must not include this node")
        self.node_id = node_id
        self.listen = listen
        self.options = options or TransportOptions()
        self.security = security
        self.stats = TransportStats()
        self.groups = set(groups)
        self.on_unreachable: Callable[[int], None] | None = None
        self._peers = dict(peers)
        self._known = set(peers)
        self._router = GroupRouter(self.stats)
        self._server: grpc.aio.Server | None = None
        self._senders: dict[int, _PeerSender] = {}
        self._closed = False
        self._entry_encoder = EntryEncoder()  # shared: followers get the same entries
        self.bound_port: int | None = None
        n = self.options.max_message_bytes
        self._channel_options = [
            ("grpc.max_send_message_length", n),
            ("grpc.max_receive_message_length", n),
            ("grpc.keepalive_time_ms", 2000),
            ("grpc.keepalive_timeout_ms", 2000),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.initial_reconnect_backoff_ms", 50),
            ("grpc.max_reconnect_backoff_ms", 1000),
        ]

    def _channel(self, address: str) -> grpc.aio.Channel:
        """A new channel to a peer: plaintext, or TLS with the credentials current now
        (a reload takes effect at the next reconnect)."""
        if self.security is None:
            return grpc.aio.insecure_channel(address, options=self._channel_options)
        return grpc.aio.secure_channel(
            address, self.security.channel_credentials(), options=self._channel_options
        )

    @property
    def accepted_groups(self) -> frozenset[int]:
        """The groups whose messages are delivered (those with a handler)."""
        return frozenset(self._router.handlers)

    def register_group(self, group_id: int, handler: MessageHandler) -> None:
        """Deliver validated messages of group_id to handler (replacing any earlier one).

        May be called before or after start; messages of one batch reach one
        handler in wire order.
        """
        self.groups.add(group_id)
        self._router.handlers[group_id] = handler

    def unregister_group(self, group_id: int) -> None:
        """Stop delivering group_id: its messages are dropped as unknown from now on."""
        self.groups.discard(group_id)
        self._router.handlers.pop(group_id, None)

    async def start(self, handler: MessageHandler | None = None) -> None:
        """Serve incoming messages and start senders.

        handler, if given, is registered for every group passed to the
        constructor (the single-group use); otherwise register groups with
        register_group.
        """
        if handler is not None:
            for g in self.groups:
                self.register_group(g, handler)
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", self.options.max_message_bytes),
                ("grpc.max_send_message_length", 1024 * 1024),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.min_ping_interval_without_data_ms", 1000),
                ("grpc.so_reuseport", 0),
            ]
        )
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    _SERVICE,
                    {
                        "Send": grpc.stream_unary_rpc_method_handler(
                            self._serve_send,
                            request_deserializer=pb.MessageBatch.FromString,
                            response_serializer=pb.SendSummary.SerializeToString,
                        )
                    },
                ),
            )
        )
        try:
            if self.security is None:
                port = server.add_insecure_port(self.listen)
            else:
                port = server.add_secure_port(
                    self.listen, self.security.server_credentials(require_client=True)
                )
        except RuntimeError as exc:
            raise TransportError(f"cannot listen on {self.listen}: {exc}") from exc
        if port == 0:
            raise TransportError(f"cannot listen on {self.listen} (address in use?)")
        self.bound_port = port
        await server.start()
        self._server = server
        for peer, address in self._peers.items():
            self._start_sender(peer, address)

    def _start_sender(self, peer: int, address: str) -> None:
        sender = _PeerSender(self, peer, address)
        sender.task = asyncio.create_task(sender.run(), name=f"raft-send-{self.node_id}->{peer}")
        self._senders[peer] = sender

    def add_peer(self, peer: int, address: str) -> None:
        """A node joined (membership change): accept its messages and send to it."""
        if peer == self.node_id or peer in self._senders:
            return
        self._peers[peer] = address
        self._known.add(peer)
        if self._server is not None:
            self._start_sender(peer, address)

    def move_peer(self, peer: int, address: str) -> None:
        """A member now listens at another address (replaced at a new host): send there.
        Messages queued for the old address are dropped (Raft retransmits)."""
        old = self._senders.get(peer)
        if old is None or peer == self.node_id:
            self.add_peer(peer, address)
            return
        if old.address == address:
            return
        old.wakeup.set()
        if old.task is not None:
            old.task.cancel()
        del self._senders[peer]
        self._peers[peer] = address
        if self._server is not None:
            self._start_sender(peer, address)

    def send(self, msgs: Iterable[Message]) -> None:
        """Queue messages for their destinations; never blocks, never raises for a down peer."""
        for m in msgs:
            sender = self._senders.get(m.dst)
            if sender is None:
                self.stats.dropped_messages += 1
                continue
            sender.enqueue(m)

    def peer_connected(self, peer: int) -> bool:
        """Whether the send stream to peer is up (its newest write went through;
        False from a failed write or connect until a write succeeds again)."""
        sender = self._senders.get(peer)
        return sender is not None and sender.connected

    def _report_unreachable(self, peer: int) -> None:
        if self.on_unreachable is not None:
            self.on_unreachable(peer)

    async def _serve_send(
        self, request_iterator, context: grpc.aio.ServicerContext
    ) -> pb.SendSummary:
        received = 0
        router = self._router
        async for batch in request_iterator:
            try:
                msgs, unknown = decode_batch_known(
                    batch, self.node_id, self._known, router.handlers, self.options.limits
                )
            except InvalidMessageError as exc:
                self.stats.rejected_batches += 1
                log.warning("transport.rejected peer=%s reason=%s", context.peer(), exc)
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"rejected: {exc}")
                raise AssertionError("unreachable") from exc
            if unknown:
                router.unknown(context.peer(), unknown)
            received += len(msgs)
            self.stats.received_messages += len(msgs)
            if msgs:
                router.deliver(msgs)
        return pb.SendSummary(received=received)

    async def close(self) -> None:
        """Stop senders and the server. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for s in self._senders.values():
            s.wakeup.set()
            if s.task is not None:
                s.task.cancel()
        for s in self._senders.values():
            if s.task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await s.task
        if self._server is not None:
            await self._server.stop(grace=0.5)

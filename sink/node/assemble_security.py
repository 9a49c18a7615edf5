"""The security wiring of a SinkNode (a part of sink.node.assemble.SinkNode, holding
no state of its own: every field is SinkNode's, set in its __init__).

SASL users (_start_users), ACL bindings and the authorizer (_start_acls), the
listeners' SASL policy and the relay's login (_sasl), this node's TLS credentials as a
client of another node's read API, and reload_tls (SIGHUP). The TLS files are first
read in SinkNode.start, before anything starts (sink.node.assemble).
"""

from __future__ import annotations

import logging

import grpc

from sink.security.acl_service import AclService
from sink.security.authorizer import Authorizer
from sink.security.sasl import PLAIN, SaslPolicy
from sink.security.sasl_client import Login
from sink.security.sasl_options import fake_key
from sink.security.user_service import UserService

log = logging.getLogger("sink.node")


class SecurityWiring:
    """The security part of SinkNode (no state of its own)."""

    def _start_users(self) -> None:
        """SASL users (sink.security.user_service): read by every listener's logins,
        the bootstrap users written by the first ready leader (also when SASL is off,
        so users can exist before it is turned on)."""
        sasl = self.config.sasl
        self.users = UserService(
            lambda: self.fsm.users,
            self.service._apply_entry,
            is_leader=self.node.is_leader,
            leader_ready=self.service.leader_ready,
            bootstrap=sasl.users(),
            iterations=sasl.iterations,
        )
        self.service.users = self.users  # type: ignore[attr-defined]
        self.fsm.on_leader_change.append(self.users.on_leadership_change)
        self.users.on_leadership_change()  # led before the callback was registered

    def _start_acls(self) -> None:
        """ACL bindings (always kept, so they can be written before authorization is
        turned on) and, with authorization.enabled, the authorizer every listener's
        handlers ask. The SASL relay user is a super user: a follower authorizes a
        request for its client before relaying it to the leader as that user."""
        authz = self.config.authorization
        self.service.acls = AclService(  # type: ignore[attr-defined]
            lambda: self.fsm.acls, self.service._apply_entry, is_leader=self.node.is_leader
        )
        if not authz.enabled:
            self.service.authorizer = None  # type: ignore[attr-defined]
            log.warning(
                "sink.authorization OFF on node %d: every client may do everything "
                "(authorization.enabled=false; `raftsink local` default)",
                self.config.node_id,
            )
            return
        relay = self.config.sasl.relay_login() if self.config.sasl.enabled else None
        extra = [f"User:{relay[0]}"] if relay is not None else []
        self.service.authorizer = Authorizer(  # type: ignore[attr-defined]
            lambda: self.fsm.acls, authz, extra_super_users=extra
        )
        log.warning(
            "sink.authorization ON node=%d super_users=%s allow_if_no_acls=%s",
            self.config.node_id,
            sorted(self.service.authorizer.super_users),  # type: ignore[attr-defined]
            authz.allow_if_no_acls,
        )

    def _sasl(self) -> tuple[SaslPolicy | None, Login | None]:
        """The listeners' SASL policy (None: open) and the relay's login."""
        sasl = self.config.sasl
        if not sasl.enabled:
            return None, None
        mechs = sasl.mechanism_list()
        policy = SaslPolicy(mechs, sasl.session_lifetime_ms, fake_key())
        who = sasl.relay_login()
        if who is None:
            return policy, None
        scram = [m for m in ("SCRAM-SHA-512", "SCRAM-SHA-256") if m in mechs]
        return policy, Login(scram[0] if scram else PLAIN, *who)

    def read_api_client_credentials(self) -> grpc.ChannelCredentials | None:
        """This node as a client of another node's read API: TLS with its own
        certificate when the read API is TLS (current files), else None (plaintext)."""
        if self.tls is None or self.tls.grpc is None or not self.config.tls.read_api:
            return None
        return self.tls.grpc.channel_credentials()

    def reload_tls(self) -> bool:
        """Read the TLS files again (SIGHUP): new connections and handshakes use them,
        open ones keep theirs; a failed reload keeps the old files (logged). False
        when TLS is off or the reload failed."""
        return self.tls.reload() if self.tls is not None else False

"""The `authorization` configuration section (ACLs; sink.security.authorizer)."""

from __future__ import annotations

from dataclasses import dataclass

from sink.security.principal import parse_rules


class AuthorizationConfigError(ValueError):
    """An `authorization.*` setting is invalid (the message names the key)."""


@dataclass(frozen=True, slots=True)
class AuthorizationOptions:
    enabled: bool = True
    """Every Kafka request is checked against the ACLs (`raftsink acl`) with the
    connection's principal (the SASL user, the client certificate's subject, else
    User:ANONYMOUS). ON by default: a node started with `raftsink serve` and no ACLs
    refuses every client that is not a super user. Only `raftsink local` (and the test
    and bench launchers built on it) turn it off."""
    super_users: str = ""
    """Principals that bypass every check, `;`-separated (`User:admin;User:CN=node1`),
    as Kafka's super.users. The SASL relay user (sasl.relay_user) is one implicitly:
    a follower authorizes a request before it relays it to the leader as that user."""
    allow_if_no_acls: bool = False
    """Allow a request on a resource no ACL names at all (Kafka's
    allow.everyone.if.no.acl.found). Off: nothing is allowed without an ACL."""
    tls_principal_rules: str = "DEFAULT"
    """How a client certificate's subject becomes the principal without SASL, in
    Kafka's ssl.principal.mapping.rules syntax: `RULE:^CN=([^,]*).*$/$1/,DEFAULT`
    gives User:alice for CN=alice,O=acme; DEFAULT gives User:CN=alice,O=acme."""

    def __post_init__(self) -> None:
        try:
            parse_rules(self.tls_principal_rules)
        except ValueError as exc:
            raise AuthorizationConfigError(f"authorization.{exc}") from None
        for p in self.super_user_list():
            kind, sep, name = p.partition(":")
            if not sep or not kind or not name:
                raise AuthorizationConfigError(
                    f"authorization.super_users: {p!r} is not TYPE:NAME (e.g. User:admin)"
                )

    def super_user_list(self) -> tuple[str, ...]:
        return tuple(p.strip() for p in self.super_users.split(";") if p.strip())

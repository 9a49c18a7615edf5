"""Who a Kafka connection is: its principal, as Kafka names it.

- SASL: "User:<name>" of the authenticated user (sink.security.sasl);
- TLS with a client certificate and no SASL: "User:" + the certificate subject's
  distinguished name in RFC 2253 order ("CN=alice,OU=eng,O=acme"), mapped by the
  rules of authorization.tls_principal_rules: Kafka's ssl.principal.mapping.rules
  syntax, `RULE:pattern/replacement/[LU],...,DEFAULT`; the first rule whose
  pattern matches the whole DN gives the name (L/U: lower/upper case), DEFAULT the
  DN itself;
- otherwise "User:ANONYMOUS".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sink.security.acl import ANONYMOUS

# Kafka's SslPrincipalMapper.RULE_PARSER: DEFAULT, or RULE:pattern/replacement/[LU].
_RULE = re.compile(r"\s*((DEFAULT)|RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU]?))\s*(,|$)")


class PrincipalRuleError(ValueError):
    """authorization.tls_principal_rules cannot be read (the message says where)."""


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        m = self.pattern.fullmatch(dn)
        if m is None:
            return None
        out = m.expand(self.replacement)
        return out.lower() if self.case == "L" else out.upper() if self.case == "U" else out


def parse_rules(text: str) -> tuple[_Rule, ...]:
    """Kafka's rule list -> rules (PrincipalRuleError if malformed)."""
    text = text.strip() or "DEFAULT"
    rules: list[_Rule] = []
    pos = 0
    while pos < len(text):
        m = _RULE.match(text, pos)
        if m is None or m.end() == pos:
            raise PrincipalRuleError(f"tls_principal_rules: cannot read {text[pos:]!r}")
        if m.group(2):
            rules.append(_Rule(None))
        else:
            pattern = m.group(3).replace("\\/", "/")
            # Kafka's replacement uses $1; Python's expand uses \1.
            repl = re.sub(r"\$(\d+)", r"\\\1", m.group(4).replace("\\/", "/"))
            try:
                rules.append(_Rule(re.compile(pattern), repl, m.group(5)))
            except re.error as exc:
                raise PrincipalRuleError(f"tls_principal_rules: {pattern!r}: {exc}") from None
        pos = m.end()
    return tuple(rules)


def subject_dn(peercert: dict[str, Any]) -> str:
    """ssl.SSLSocket.getpeercert()'s subject as an RFC 2253 string (most specific
    first, as Java's X500Principal.getName() prints it)."""
    names = {
        "commonName": "CN",
        "organizationalUnitName": "OU",
        "organizationName": "O",
        "localityName": "L",
        "stateOrProvinceName": "ST",
        "countryName": "C",
        "domainComponent": "DC",
        "userId": "UID",
    }
    rdns = []
    for rdn in peercert.get("subject", ()):
        parts = []
        for key, value in rdn:
            esc = re.sub(r'([,+"\\<>;])', r"\\\1", value)
            parts.append(f"{names.get(key, key)}={esc}")
        rdns.append("+".join(parts))
    return ",".join(reversed(rdns))


def tls_principal(peercert: dict[str, Any] | None, rules: tuple[_Rule, ...]) -> str | None:
    """The principal of a verified client certificate, or None (no certificate)."""
    if not peercert or not peercert.get("subject"):
        return None
    dn = subject_dn(peercert)
    for rule in rules:
        name = rule.apply(dn)
        if name is not None:
            return f"User:{name}"
    return f"User:{dn}"


def connection_principal(sasl: Any, tls: str | None) -> str:
    """The principal a request runs as: the SASL user once authenticated, else the
    client certificate's, else ANONYMOUS."""
    if sasl is not None and sasl.principal:
        return str(sasl.principal)
    return tls or ANONYMOUS

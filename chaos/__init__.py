"""raftsink chaos: a Jepsen-style fault campaign against a local 3-node cluster.

Entry point: run_campaign(seed, out_dir, seconds=... | minutes=..., nemeses=[...]);
command line: `python -m chaos --seed N --minutes M --out DIR [--nemesis ...]`.
A tool beside the server (the server never imports it); `raftsink chaos` is registered
through the raftsink.commands entry point (chaos/command.py). See docs/chaos.md. Imports
are lazy so that importing the package stays light.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CampaignOptions", "run_campaign"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from chaos import campaign

        return getattr(campaign, name)
    raise AttributeError(name)

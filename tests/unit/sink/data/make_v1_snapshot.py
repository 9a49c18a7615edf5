"""Write v1_snapshot.bin: the snapshot the pre-split SinkStateMachine (format v1, topic
names as keys) saved after tests/unit/sink/state_scenario.py's history.

Run against the old code, e.g. (from a checkout of 0ed6962, the commit before the split):
    git archive 0ed6962 | tar -x -C /tmp/v1src
    cp tests/unit/sink/state_scenario.py /tmp/v1src/tests/unit/sink/
    cd /tmp/v1src && python tests/unit/sink/data/make_v1_snapshot.py OUT
"""

from __future__ import annotations

import sys

from sink.state import SinkStateMachine
from tests.unit.sink import state_scenario


def main(out: str) -> None:
    fsm = SinkStateMachine()
    fsm.on_apply(state_scenario.entries())
    with open(out, "wb") as f:
        f.write(fsm.on_snapshot_save())


if __name__ == "__main__":
    main(sys.argv[1])

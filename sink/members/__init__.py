"""Cluster membership you can operate (issue 12): the leader-side operations (add,
remove, replace, transfer leadership), their read API endpoint, and the node's watcher
that makes the live configuration its transport peers and its Kafka brokers. Member
addresses travel through the log as "M" entries (sink.state.members).

    operator.py  MembershipOperator: validated, one-at-a-time changes on the leader
    rpc.py       MembersEndpoint: the read API's Members call (JSON), forwarding
    watch.py     MemberWatch: applies the live configuration to a running node
"""

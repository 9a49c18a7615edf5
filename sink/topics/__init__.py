"""Topics as Kafka users configure them: the config table (configs), their replicated
state (state: the K and U entries) and retention by time and size (retention).

Leaves of the sink: they import only sink.kafka.protocol and the standard library, so
the state machine, the service and the Kafka handlers may all use them.

"""

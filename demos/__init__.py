"""raftsink's demos, a tool beside the server package (the server never imports them).

- demos.pipeline: the main job, `raftsink demo` (Kafka producers -> 3-node cluster -> Spark
  Structured Streaming -> Parquet, with a leader kill); needs the `demo` extra.
- demos.storage_demo: `raftsink demo --storage`, the storage crash demo (base install).

Nodes are started through the public launcher sink.process_cluster.SinkProcessCluster;
`raftsink demo` is registered through the `raftsink.commands` entry-point group
(demos/command.py).
"""

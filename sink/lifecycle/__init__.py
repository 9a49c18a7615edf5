"""Topic lifecycle and producer-state expiry, the node-side halves of the admin
entries applied by sink/state/topic_admin.py: they propose D/A/R/X entries through
the log and read the applied state, so they sit above sink.state (sink.topics, which
sink.state itself uses, stays a leaf).

    topics           TopicLifecycle: DeleteTopics, CreatePartitions, DeleteRecords,
                     DescribeLogDirs' sizes
    producer_expiry  ProducerExpiry (+ ProducerExpiryOptions): idle producer ids
                     expired through the log
"""

from sink.lifecycle.producer_expiry import ProducerExpiry, ProducerExpiryOptions
from sink.lifecycle.topics import TopicLifecycle

__all__ = ["ProducerExpiry", "ProducerExpiryOptions", "TopicLifecycle"]

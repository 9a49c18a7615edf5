"""Topic lifecycle and producer-state expiry, the node-side halves of the admin
entries applied by sink/state/topic_admin.py: they propose D/A/R/X entries through
the log and read the applied state, so they sit above sink.state (sink.topics, which
sink.state itself uses, stays a leaf).

    topics           TopicLifecycle: DeleteTopics, CreatePartitions, DeleteRecords,
                     DescribeLogDirs' sizes
    producer_expiry  ProducerExpiry (+ ProducerExpiryOptions): idle producer ids
                     expired through the log
    sequence_gaps    SequenceGaps: a sequence gap answered retriably for a grace
                     period before OUT_OF_ORDER_SEQUENCE_NUMBER (no client epoch bump)
"""

from sink.lifecycle.producer_expiry import ProducerExpiry, ProducerExpiryOptions
from sink.lifecycle.sequence_gaps import SequenceGaps
from sink.lifecycle.topics import TopicLifecycle

__all__ = ["ProducerExpiry", "ProducerExpiryOptions", "SequenceGaps", "TopicLifecycle"]

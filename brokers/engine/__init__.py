"""The message engine on Redis: one engine behind every protocol front-end.

Public API: :class:`Engine` (the facade) and the types its methods take and return.
Front-ends, the console and the pipeline import from here only.
"""

from brokers.engine.ack import contiguous
from brokers.engine.append import java_hash
from brokers.engine.background import cancel_and_wait
from brokers.engine.catalog import (
    AppInfo,
    BrokerInfo,
    CatalogSnapshot,
    CatalogWatcher,
    ConsumerPolicyInfo,
    PartitionGroupInfo,
    ProducerPolicyInfo,
    QueueSettings,
    TopicInfo,
    hash_token,
    load_snapshot,
    publish_snapshot,
)
from brokers.engine.counters import MinuteTraffic
from brokers.engine.delay import DELAY_LEVELS
from brokers.engine.engine import Engine
from brokers.engine.errors import (
    AccessDenied,
    AckRejected,
    BrokerNotLeader,
    BrokerNotWritable,
    ClientIdNotAllowed,
    ClientIdRequired,
    ClientNotAllowed,
    ConsumerClientNotAllowed,
    ConsumerNotFound,
    ConsumerPaused,
    EngineError,
    IndexOutOfRange,
    InvalidMessage,
    MessageTooLarge,
    NoWritablePartition,
    PartitionNotFound,
    ProducerNotFound,
    QueueFull,
    RateLimited,
    StoreUnavailable,
    TopicNotFound,
    TransactionLimit,
    TransactionNotFound,
    WriteTimeout,
)
from brokers.engine.groups import GroupStats
from brokers.engine.groups import seed as seed_group
from brokers.engine.keys import RETRY_PARTITION
from brokers.engine.leadership import RECORD_LEADER_LUA, leader_records
from brokers.engine.mailbox import Mailboxes
from brokers.engine.model import (
    AckResult,
    AckStatus,
    AppendResult,
    CommitResult,
    CommitStatus,
    Delivery,
    FetchResult,
    FetchStatus,
    PartitionProgress,
    QoS,
    RetryRecord,
    RetryType,
    StoredEntry,
    TransactionInfo,
)
from brokers.engine.overview import GroupLag, TopicRate
from brokers.engine.presence import Presence
from brokers.engine.priority import PRIORITY_BANDS, PRIORITY_MODE, band_of, band_partition
from brokers.engine.record import (
    BatchItem,
    Message,
    StoredMessage,
    decode_attributes,
    decode_batch_body,
    decode_record,
    encode_attributes,
    encode_batch_body,
    encode_record,
)
from brokers.engine.redisio import AnyRedis, broker_client, engine_client
from brokers.engine.reports import publish_report, read_reports, withdraw_report
from brokers.engine.retry import RetryPolicy
from brokers.engine.shared import Lease, QueueRetry
from brokers.engine.unbatch import one_by_one
from brokers.engine.wire import WireBlob, WireRecords

__all__ = [
    "DELAY_LEVELS",
    "PRIORITY_BANDS",
    "PRIORITY_MODE",
    "RECORD_LEADER_LUA",
    "RETRY_PARTITION",
    "AccessDenied",
    "AckRejected",
    "AckResult",
    "AckStatus",
    "AnyRedis",
    "AppInfo",
    "AppendResult",
    "BatchItem",
    "BrokerInfo",
    "BrokerNotLeader",
    "BrokerNotWritable",
    "CatalogSnapshot",
    "CatalogWatcher",
    "ClientIdNotAllowed",
    "ClientIdRequired",
    "ClientNotAllowed",
    "CommitResult",
    "CommitStatus",
    "ConsumerClientNotAllowed",
    "ConsumerNotFound",
    "ConsumerPaused",
    "ConsumerPolicyInfo",
    "Delivery",
    "Engine",
    "EngineError",
    "FetchResult",
    "FetchStatus",
    "GroupLag",
    "GroupStats",
    "IndexOutOfRange",
    "InvalidMessage",
    "Lease",
    "Mailboxes",
    "Message",
    "MessageTooLarge",
    "MinuteTraffic",
    "NoWritablePartition",
    "PartitionGroupInfo",
    "PartitionNotFound",
    "PartitionProgress",
    "Presence",
    "ProducerNotFound",
    "ProducerPolicyInfo",
    "QoS",
    "QueueFull",
    "QueueRetry",
    "QueueSettings",
    "RateLimited",
    "RetryPolicy",
    "RetryRecord",
    "RetryType",
    "StoreUnavailable",
    "StoredEntry",
    "StoredMessage",
    "TopicInfo",
    "TopicNotFound",
    "TopicRate",
    "TransactionInfo",
    "TransactionLimit",
    "TransactionNotFound",
    "WireBlob",
    "WireRecords",
    "WriteTimeout",
    "band_of",
    "band_partition",
    "broker_client",
    "cancel_and_wait",
    "contiguous",
    "decode_attributes",
    "decode_batch_body",
    "decode_record",
    "encode_attributes",
    "encode_batch_body",
    "encode_record",
    "engine_client",
    "hash_token",
    "java_hash",
    "leader_records",
    "load_snapshot",
    "one_by_one",
    "publish_report",
    "publish_snapshot",
    "read_reports",
    "seed_group",
    "withdraw_report",
]

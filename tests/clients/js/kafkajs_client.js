// kafkajs_client: one Kafka operation with KafkaJS, for tests/integration/test_client_windows.py.
//
// KafkaJS picks min(its own newest version, the broker's max) per API and ignores the broker's
// minimum. The program prints one JSON object on stdout ({"ok": true, ...} or {"ok": false,
// "error": "..."}, with KafkaJS's warnings and errors in "log") and exits 0 in both cases.
//
//   node kafkajs_client.js BROKERS OP TOPIC [N]
//
// OP: metadata | create | produce | idempotent | consume | fetch
//   - create: admin.createTopics (3 partitions, replication 3), then fetchTopicMetadata.
//   - produce / idempotent: N records (key k<i>, value <TOPIC>-v<i>) in one send(acks -1),
//     gzip-compressed when KAFKAJS_GZIP is set. KAFKAJS_CLIENT_ID sets the client id.
//   - consume: the public consumer (a group member: FindCoordinator, JoinGroup, SyncGroup...),
//     subscribe fromBeginning, until every record below the high watermarks came in.
//   - fetch: no group: admin.fetchTopicOffsets (ListOffsets), then Fetch requests to each
//     partition's leader through KafkaJS's own cluster and broker objects (its Fetch encoder and
//     record decoder, the public consumer's fetch path without the group).
//   - admin: on an existing 1-partition topic with N records: createPartitions to 1 (expects an
//     error), to 3; deleteTopicRecords to offset 2; fetchTopicOffsets; fetchTopicOffsetsByTimestamp
//     before the first, inside and after the last record (times given in KAFKAJS_TIMES as JSON);
//     describeCluster; deleteTopics. Prints every answer for the test to check.
//   - member: one consumer-group member for tests/integration/test_consumer_groups_clients.py
//     (group KAFKAJS_GROUP, session timeout KAFKAJS_SESSION_MS): it runs until SIGTERM, then
//     disconnects (LeaveGroup) and exits. Unlike the other ops it prints one JSON line per
//     event, the protocol of tests/clients/py/group_member.py: ready, assignment (on each
//     GROUP_JOIN), recs (one batch, before its commit), commit (after commitOffsets returned),
//     commit_failed, error, closed. KafkaJS has no cooperative protocol and no static membership.
//     KAFKAJS_MEMBER_RETRIES sets its retry count (default 50).
// Keys and values are printed as UTF-8 strings (the test only uses text).
// TLS (tests/integration/test_tls_clients.py): KAFKAJS_SSL_CA (a PEM file) turns it on;
// KAFKAJS_SSL_CERT and KAFKAJS_SSL_KEY add a client certificate.
// KAFKAJS_SASL (JSON {"mechanism": "scram-sha-512" | "plain", "username", "password"}): log in
// with SASL (SASL_PLAINTEXT), for tests/integration/test_sasl_clients.py.
'use strict'

const fs = require('fs')

const { Kafka, logLevel, CompressionTypes } = require('kafkajs')

const [brokers, op, topic, nArg] = process.argv.slice(2)
const n = Number(nArg || 100)
const DEADLINE_MS = Number(process.env.KAFKAJS_DEADLINE_MS || 30000)
const logs = []

const kafka = new Kafka({
  clientId: process.env.KAFKAJS_CLIENT_ID || 'kafkajs-window-test',
  brokers: brokers.split(','),
  connectionTimeout: 5000,
  requestTimeout: 10000,
  retry: { retries: 3, initialRetryTime: 200, maxRetryTime: 2000 },
  logLevel: logLevel.WARN,
  ssl: process.env.KAFKAJS_SSL_CA
    ? {
        ca: [fs.readFileSync(process.env.KAFKAJS_SSL_CA, 'utf-8')],
        ...(process.env.KAFKAJS_SSL_CERT
          ? {
              cert: fs.readFileSync(process.env.KAFKAJS_SSL_CERT, 'utf-8'),
              key: fs.readFileSync(process.env.KAFKAJS_SSL_KEY, 'utf-8'),
            }
          : {}),
      }
    : undefined,
  sasl: process.env.KAFKAJS_SASL ? JSON.parse(process.env.KAFKAJS_SASL) : undefined,
  logCreator: () => ({ level, log }) => {
    logs.push(`${log.message}${log.error ? ': ' + log.error : ''}`)
  },
})

function emit(obj) {
  process.stdout.write(JSON.stringify({ ...obj, log: logs.slice(-20) }) + '\n')
}

async function metadata() {
  const admin = kafka.admin()
  await admin.connect()
  try {
    const cluster = await admin.describeCluster()
    const md = await admin.fetchTopicMetadata(topic ? { topics: [topic] } : undefined)
    return {
      brokers: Object.fromEntries(cluster.brokers.map(b => [String(b.nodeId), `${b.host}:${b.port}`])),
      controller: cluster.controller,
      topics: Object.fromEntries(
        md.topics.map(t => [
          t.name,
          t.partitions.map(p => ({ id: p.partitionId, leader: p.leader, replicas: p.replicas })),
        ])
      ),
    }
  } finally {
    await admin.disconnect()
  }
}

async function create() {
  const admin = kafka.admin()
  await admin.connect()
  try {
    const created = await admin.createTopics({
      waitForLeaders: true,
      topics: [{ topic, numPartitions: 3, replicationFactor: 3 }],
    })
    if (!created) throw new Error('createTopics returned false (topic already existed)')
  } finally {
    await admin.disconnect()
  }
  return metadata()
}

async function produce(idempotent) {
  const producer = kafka.producer(
    idempotent ? { idempotent: true, maxInFlightRequests: 1 } : { allowAutoTopicCreation: true }
  )
  await producer.connect()
  try {
    const messages = []
    for (let i = 0; i < n; i++) messages.push({ key: `k${i}`, value: `${topic}-v${i}` })
    // KafkaJS has gzip built in; the other codecs need plugins
    const compression = process.env.KAFKAJS_GZIP ? CompressionTypes.GZIP : CompressionTypes.None
    const meta = await producer.send({ topic, acks: -1, messages, compression })
    return {
      partitions: meta.map(m => ({
        partition: m.partition,
        error: m.errorCode,
        baseOffset: Number(m.baseOffset),
      })),
    }
  } finally {
    await producer.disconnect()
  }
}

async function highWatermarks(admin) {
  const offsets = await admin.fetchTopicOffsets(topic)
  return Object.fromEntries(offsets.map(o => [o.partition, Number(o.high)]))
}

async function consume() {
  const admin = kafka.admin()
  await admin.connect()
  const high = await highWatermarks(admin)
  await admin.disconnect()
  const total = Object.values(high).reduce((a, b) => a + b, 0)
  const records = []
  const consumer = kafka.consumer({ groupId: `g-${topic}`, sessionTimeout: 10000 })
  let crashed = null
  consumer.on(consumer.events.CRASH, e => { crashed = e.payload.error })
  await consumer.connect()
  try {
    await consumer.subscribe({ topic, fromBeginning: true })
    await new Promise((resolve, reject) => {
      const timer = setInterval(() => {
        if (records.length >= total) { clearInterval(timer); resolve() }
        if (crashed) { clearInterval(timer); reject(crashed) }
      }, 50)
      consumer.run({
        autoCommit: false,
        eachMessage: async ({ partition, message }) => {
          records.push({
            partition,
            offset: Number(message.offset),
            key: message.key && message.key.toString(),
            value: message.value && message.value.toString(),
          })
        },
      }).catch(reject)
    })
  } finally {
    await consumer.disconnect()
  }
  return { records }
}

async function fetchNoGroup() {
  const admin = kafka.admin()
  await admin.connect()
  const high = await highWatermarks(admin)
  await admin.disconnect()
  const sym = Object.getOwnPropertySymbols(kafka).find(
    s => s.description === 'private:Kafka:createCluster'
  )
  const cluster = kafka[sym]({ allowAutoTopicCreation: false })
  await cluster.connect()
  const records = []
  try {
    await cluster.addTargetTopic(topic)
    for (const pm of cluster.findTopicPartitionMetadata(topic)) {
      const partition = pm.partitionId
      const broker = await cluster.findBroker({ nodeId: pm.leader })
      let offset = 0
      while (offset < (high[partition] || 0)) {
        const resp = await broker.fetch({
          maxWaitTime: 200,
          isolationLevel: 0,
          topics: [{ topic, partitions: [{ partition, fetchOffset: String(offset), maxBytes: 1048576 }] }],
        })
        const part = resp.responses[0].partitions[0]
        if (part.errorCode !== 0) throw new Error(`fetch partition ${partition}: error ${part.errorCode}`)
        for (const m of part.messages) {
          if (Number(m.offset) < offset) continue // whole batches come back
          records.push({
            partition,
            offset: Number(m.offset),
            key: m.key && m.key.toString(),
            value: m.value && m.value.toString(),
          })
          offset = Number(m.offset) + 1
        }
      }
    }
  } finally {
    await cluster.disconnect()
  }
  return { records, high }
}

function line(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n')
}

// A group member until SIGTERM (see the header); never returns through OPS/main.
async function member() {
  const consumer = kafka.consumer({
    groupId: process.env.KAFKAJS_GROUP || `g-${topic}`,
    sessionTimeout: Number(process.env.KAFKAJS_SESSION_MS || 10000),
    heartbeatInterval: Math.max(100, Number(process.env.KAFKAJS_SESSION_MS || 10000) / 10),
    rebalanceTimeout: 30000,
    maxWaitTimeInMs: 100,
    // KAFKAJS_MEMBER_RETRIES (default 50): the consumer's retry count. Its retrier giving up
    // is what restarts a KafkaJS consumer, the only way it leaves a coordinator that died
    // (the leader-kill test uses KafkaJS's default, 5).
    retry: {
      retries: Number(process.env.KAFKAJS_MEMBER_RETRIES || 50),
      initialRetryTime: 100,
      maxRetryTime: 1000,
    },
  })
  let stopping = false
  const stop = async () => {
    if (stopping) return
    stopping = true
    try {
      await consumer.disconnect()
    } catch (e) {
      line({ ev: 'error', error: `disconnect: ${e.message}` })
    }
    line({ ev: 'closed' })
    process.exit(0)
  }
  process.on('SIGTERM', stop)
  process.on('SIGINT', stop)
  consumer.on(consumer.events.GROUP_JOIN, e => {
    const parts = (e.payload.memberAssignment[topic] || []).slice().sort((a, b) => a - b)
    line({ ev: 'assignment', parts })
  })
  consumer.on(consumer.events.CRASH, e => {
    line({ ev: 'error', error: `crash: ${e.payload.error && e.payload.error.message}` })
  })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  line({ ev: 'ready' })
  await consumer.run({
    autoCommit: false,
    eachBatch: async ({ batch, heartbeat, isRunning, isStale }) => {
      if (!isRunning() || isStale() || batch.messages.length === 0) return
      const recs = batch.messages.map(m => [batch.partition, Number(m.offset)])
      line({ ev: 'recs', recs })
      const next = String(Number(batch.messages[batch.messages.length - 1].offset) + 1)
      try {
        await consumer.commitOffsets([{ topic, partition: batch.partition, offset: next }])
        line({ ev: 'commit', offs: { [batch.partition]: Number(next) } })
      } catch (e) {
        line({ ev: 'commit_failed', error: `${e.name}: ${e.message}` })
      }
      await heartbeat()
    },
  })
  await new Promise(() => {}) // until SIGTERM
}

const OPS = {
  metadata,
  create,
  produce: () => produce(false),
  idempotent: () => produce(true),
  consume,
  fetch: fetchNoGroup,
  admin: adminOps,
}

async function adminOps() {
  const admin = kafka.admin()
  await admin.connect()
  const out = {}
  try {
    try {
      await admin.createPartitions({ topicPartitions: [{ topic, count: 1 }] })
      out.shrink = 'accepted'
    } catch (e) {
      out.shrink = e.type || e.name
    }
    await admin.createPartitions({ topicPartitions: [{ topic, count: 3 }] })
    // Metadata comes from any node: a follower may not have applied the change yet (as
    // with Kafka's metadata propagation), so poll it for up to 10 s.
    for (let i = 0; i < 100; i++) {
      const md = await admin.fetchTopicMetadata({ topics: [topic] })
      out.partitions = md.topics[0].partitions.length
      if (out.partitions === 3) break
      await new Promise(r => setTimeout(r, 100))
    }
    await admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: '2' }] })
    out.offsets = await admin.fetchTopicOffsets(topic)
    const times = JSON.parse(process.env.KAFKAJS_TIMES || '[]')
    out.byTime = {}
    for (const ts of times) {
      const r = await admin.fetchTopicOffsetsByTimestamp(topic, ts)
      out.byTime[ts] = r.find(p => p.partition === 0).offset
    }
    const cluster = await admin.describeCluster()
    out.cluster = { clusterId: cluster.clusterId, controller: cluster.controller, brokers: cluster.brokers.length }
    await admin.deleteTopics({ topics: [topic], timeout: 10000 })
    out.afterDelete = (await admin.listTopics()).includes(topic)
    return out
  } finally {
    await admin.disconnect()
  }
}

async function main() {
  if (op === 'member') {
    return member().catch(e => {
      line({ ev: 'error', error: `member ended: ${e.name}: ${e.message}` })
      process.exit(1)
    })
  }
  if (!OPS[op]) return emit({ ok: false, error: `unknown op ${op}` })
  const deadline = new Promise((_, reject) =>
    setTimeout(() => reject(new Error(`timed out after ${DEADLINE_MS} ms`)), DEADLINE_MS).unref()
  )
  try {
    const out = await Promise.race([OPS[op](), deadline])
    emit({ ok: true, ...out })
  } catch (e) {
    emit({ ok: false, error: `${e.name}: ${e.message}` })
  }
  process.exit(0)
}

main()

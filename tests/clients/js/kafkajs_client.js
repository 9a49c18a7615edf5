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
// Keys and values are printed as UTF-8 strings (the test only uses text).
'use strict'

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

const OPS = {
  metadata,
  create,
  produce: () => produce(false),
  idempotent: () => produce(true),
  consume,
  fetch: fetchNoGroup,
}

async function main() {
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

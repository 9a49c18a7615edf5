// sarama_client: one Kafka operation with Sarama (Debian's golang-github-shopify-sarama-dev)
// at a chosen Config.Version, for tests/integration/test_client_windows.py.
//
// Sarama does not negotiate versions per API: every request version follows Config.Version.
// The program prints one JSON object on stdout ({"ok": true, ...} or {"ok": false,
// "error": "..."}) and exits 0 in both cases, so the test sees Sarama's own error text.
//
//	sarama_client -brokers H:P[,H:P] -version default|newest|V2_2_0_0 -op OP -topic T [-n N]
//	              [-compression none|gzip|snappy|lz4|zstd] [-client-id ID] [-timeout 30s] [-v]
//
// OP: metadata | create | produce | idempotent | consume | commit | commit-retention
//   - create: ClusterAdmin.CreateTopic(T, -partitions, -replication), then DescribeTopics.
//   - produce / idempotent: N records (key k<i>, value <T>-v<i>) in one SendMessages call;
//     prints the partition and offset of each.
//   - consume: every partition of T from the oldest offset up to its high watermark at start;
//     prints partition, offset, key, value (bytes as base64, Go's []byte JSON form).
//   - commit / commit-retention: the offset manager (no group join) commits offset N on
//     partition 0 and a fresh one reads it back; -retention makes it OffsetCommit v2, not v1.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/ioutil"
	"log"
	"os"
	"strings"
	"time"

	"github.com/Shopify/sarama"
)

type record struct {
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Key       []byte `json:"key,omitempty"`
	Value     []byte `json:"value,omitempty"`
}

type result struct {
	Ok        bool                   `json:"ok"`
	Initial   *int64                 `json:"initial,omitempty"`
	Committed *int64                 `json:"committed,omitempty"`
	Error     string                 `json:"error,omitempty"`
	Version   string                 `json:"version"`
	Records   []record               `json:"records,omitempty"`
	Brokers   map[string]string      `json:"brokers,omitempty"`
	Topics    map[string][]partition `json:"topics,omitempty"`
}

type partition struct {
	ID       int32   `json:"id"`
	Leader   int32   `json:"leader"`
	Replicas []int32 `json:"replicas"`
}

func main() {
	brokers := flag.String("brokers", "", "bootstrap H:P list")
	version := flag.String("version", "default", "default | newest | a Sarama version (V2_2_0_0)")
	op := flag.String("op", "metadata", "metadata | create | produce | idempotent | consume")
	topic := flag.String("topic", "", "topic")
	n := flag.Int("n", 100, "records to produce")
	partitions := flag.Int("partitions", 3, "create: partitions")
	replication := flag.Int("replication", 3, "create: replication factor")
	timeout := flag.Duration("timeout", 30*time.Second, "deadline of the whole operation")
	verbose := flag.Bool("v", false, "Sarama's log on stderr")
	compression := flag.String("compression", "none", "produce: none | gzip | snappy | lz4 | zstd")
	clientID := flag.String("client-id", "sarama-window-test", "client.id sent in every request header")
	flag.Parse()

	sarama.Logger = log.New(ioutil.Discard, "", 0)
	if *verbose {
		sarama.Logger = log.New(os.Stderr, "[sarama] ", log.Lmicroseconds)
	}
	conf := sarama.NewConfig()
	conf.ClientID = *clientID
	switch *version {
	case "default": // NewConfig's own choice
	case "newest":
		conf.Version = sarama.MaxVersion
	default:
		// "V0_10_1_0" -> "0.10.1.0"; "V2_2_0_0" -> "2.2.0" (Sarama's parser wants 3 parts from 1.0)
		name := strings.TrimPrefix(strings.ReplaceAll(*version, "_", "."), "V")
		v, err := sarama.ParseKafkaVersion(name)
		if err != nil && !strings.HasPrefix(name, "0.") {
			v, err = sarama.ParseKafkaVersion(strings.TrimSuffix(name, ".0"))
		}
		if err != nil {
			emit(result{Error: err.Error(), Version: *version})
			return
		}
		conf.Version = v
	}
	codecs := map[string]sarama.CompressionCodec{
		"none": sarama.CompressionNone, "gzip": sarama.CompressionGZIP,
		"snappy": sarama.CompressionSnappy, "lz4": sarama.CompressionLZ4,
		"zstd": sarama.CompressionZSTD,
	}
	codec, known := codecs[*compression]
	if !known {
		emit(result{Error: "unknown compression " + *compression, Version: *version})
		return
	}
	conf.Producer.Compression = codec
	conf.Metadata.Retry.Max = 5
	conf.Metadata.Retry.Backoff = 200 * time.Millisecond
	conf.Net.DialTimeout = 5 * time.Second
	conf.Net.ReadTimeout = 10 * time.Second
	conf.Net.WriteTimeout = 10 * time.Second

	done := make(chan result, 1)
	go func() { done <- run(conf, strings.Split(*brokers, ","), *op, *topic, *n, *partitions, *replication) }()
	select {
	case r := <-done:
		r.Version = conf.Version.String()
		emit(r)
	case <-time.After(*timeout):
		emit(result{Error: fmt.Sprintf("timed out after %s", *timeout), Version: conf.Version.String()})
	}
}

func emit(r result) {
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
}

func fail(err error) result { return result{Error: err.Error()} }

func run(conf *sarama.Config, brokers []string, op, topic string, n, parts, repl int) result {
	switch op {
	case "metadata":
		return metadata(conf, brokers, topic)
	case "create":
		return create(conf, brokers, topic, parts, repl)
	case "produce", "idempotent":
		conf.Producer.Return.Successes = true
		conf.Producer.RequiredAcks = sarama.WaitForAll
		conf.Producer.Partitioner = sarama.NewHashPartitioner
		if op == "idempotent" {
			conf.Producer.Idempotent = true
			conf.Net.MaxOpenRequests = 1
		}
		return produce(conf, brokers, topic, n)
	case "commit", "commit-retention":
		if op == "commit-retention" {
			// a retention time makes the offset manager send OffsetCommit v2 instead of v1
			conf.Consumer.Offsets.Retention = time.Hour
		}
		return commit(conf, brokers, topic, int64(n))
	case "consume":
		conf.Consumer.Return.Errors = true // a failed Fetch ends the run, not a silent retry loop
		return consume(conf, brokers, topic)
	}
	return fail(fmt.Errorf("unknown op %q", op))
}

func metadata(conf *sarama.Config, brokers []string, topic string) result {
	client, err := sarama.NewClient(brokers, conf)
	if err != nil {
		return fail(err)
	}
	defer client.Close()
	if topic != "" {
		if err := client.RefreshMetadata(topic); err != nil {
			return fail(err)
		}
	}
	r := result{Ok: true, Brokers: map[string]string{}, Topics: map[string][]partition{}}
	for _, b := range client.Brokers() {
		r.Brokers[fmt.Sprint(b.ID())] = b.Addr()
	}
	topics, err := client.Topics()
	if err != nil {
		return fail(err)
	}
	for _, t := range topics {
		ids, err := client.Partitions(t)
		if err != nil {
			return fail(err)
		}
		for _, p := range ids {
			leader, err := client.Leader(t, p)
			if err != nil {
				return fail(err)
			}
			replicas, _ := client.Replicas(t, p)
			r.Topics[t] = append(r.Topics[t], partition{ID: p, Leader: leader.ID(), Replicas: replicas})
		}
	}
	return r
}

func create(conf *sarama.Config, brokers []string, topic string, parts, repl int) result {
	admin, err := sarama.NewClusterAdmin(brokers, conf)
	if err != nil {
		return fail(err)
	}
	defer admin.Close()
	detail := &sarama.TopicDetail{NumPartitions: int32(parts), ReplicationFactor: int16(repl)}
	if err := admin.CreateTopic(topic, detail, false); err != nil {
		return fail(err)
	}
	mds, err := admin.DescribeTopics([]string{topic})
	if err != nil {
		return fail(err)
	}
	r := result{Ok: true, Topics: map[string][]partition{}}
	for _, md := range mds {
		if md.Err != sarama.ErrNoError {
			return fail(md.Err)
		}
		for _, p := range md.Partitions {
			r.Topics[md.Name] = append(r.Topics[md.Name], partition{ID: p.ID, Leader: p.Leader, Replicas: p.Replicas})
		}
	}
	return r
}

func produce(conf *sarama.Config, brokers []string, topic string, n int) result {
	producer, err := sarama.NewSyncProducer(brokers, conf)
	if err != nil {
		return fail(err)
	}
	defer producer.Close()
	msgs := make([]*sarama.ProducerMessage, n)
	for i := range msgs {
		msgs[i] = &sarama.ProducerMessage{
			Topic: topic,
			Key:   sarama.StringEncoder(fmt.Sprintf("k%d", i)),
			Value: sarama.StringEncoder(fmt.Sprintf("%s-v%d", topic, i)),
		}
	}
	if err := producer.SendMessages(msgs); err != nil {
		var perrs sarama.ProducerErrors
		if errors.As(err, &perrs) && len(perrs) > 0 {
			return fail(fmt.Errorf("%d of %d failed, first: %v", len(perrs), n, perrs[0].Err))
		}
		return fail(err)
	}
	r := result{Ok: true}
	for i, m := range msgs {
		key, _ := msgs[i].Key.Encode()
		val, _ := msgs[i].Value.Encode()
		r.Records = append(r.Records, record{Partition: m.Partition, Offset: m.Offset, Key: key, Value: val})
	}
	return r
}

func consume(conf *sarama.Config, brokers []string, topic string) result {
	client, err := sarama.NewClient(brokers, conf)
	if err != nil {
		return fail(err)
	}
	defer client.Close()
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return fail(err)
	}
	defer consumer.Close()
	ids, err := client.Partitions(topic)
	if err != nil {
		return fail(err)
	}
	r := result{Ok: true}
	for _, p := range ids {
		hw, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return fail(fmt.Errorf("partition %d: newest offset: %v", p, err))
		}
		if hw == 0 {
			continue
		}
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			return fail(fmt.Errorf("partition %d: %v", p, err))
		}
		for done := false; !done; {
			select {
			case m := <-pc.Messages():
				r.Records = append(r.Records, record{Partition: p, Offset: m.Offset, Key: m.Key, Value: m.Value})
				done = m.Offset+1 >= hw
			case e := <-pc.Errors():
				pc.Close()
				return fail(fmt.Errorf("partition %d: %v", p, e.Err))
			}
		}
		pc.Close()
	}
	return r
}

// commit: the offset manager of group "g-<client id>" on partition 0: read the committed offset
// (OffsetFetch), mark offset n, close (the final flush sends OffsetCommit), then read it back
// with a fresh offset manager.
func commit(conf *sarama.Config, brokers []string, topic string, n int64) result {
	conf.Consumer.Offsets.Initial = sarama.OffsetOldest
	client, err := sarama.NewClient(brokers, conf)
	if err != nil {
		return fail(err)
	}
	defer client.Close()
	group := "g-" + conf.ClientID // one group per run: nothing committed before
	read := func(mark int64) (int64, error) {
		om, err := sarama.NewOffsetManagerFromClient(group, client)
		if err != nil {
			return 0, err
		}
		pom, err := om.ManagePartition(topic, 0)
		if err != nil {
			om.Close()
			return 0, err
		}
		next, _ := pom.NextOffset()
		if mark >= 0 {
			pom.MarkOffset(mark, "window-test")
		}
		pom.Close()
		om.Close()
		return next, nil
	}
	initial, err := read(n)
	if err != nil {
		return fail(fmt.Errorf("first offset manager: %v", err))
	}
	committed, err := read(-1)
	if err != nil {
		return fail(fmt.Errorf("second offset manager: %v", err))
	}
	r := result{Ok: committed == n, Initial: &initial, Committed: &committed}
	if !r.Ok {
		r.Error = fmt.Sprintf("committed offset %d, read back %d", n, committed)
	}
	return r
}

// The Java client's side of bench/tls.py --java-client: 1 KiB records to one partition and
// back, over whichever listener the bootstrap names (a PEM CA file as the fifth argument
// turns on security.protocol=SSL). The producer keeps its defaults (idempotent, acks=all,
// linger.ms=5) with larger batches; the consumer reads from the beginning until it has
// every record. Prints "RESULT <records> <seconds> <bytes or errors> <process CPU seconds in the timed part>".
import java.lang.management.ManagementFactory;
import java.time.Duration;
import java.util.List;
import java.util.Locale;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class TlsBench {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], mode = args[1], topic = args[2];
        int records = Integer.parseInt(args[3]);
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        if (args.length > 4) {
            props.put("security.protocol", "SSL");
            props.put("ssl.truststore.type", "PEM");
            props.put("ssl.truststore.location", args[4]);
        }
        if (mode.equals("produce")) {
            produce(props, topic, records);
        } else {
            consume(props, topic, records);
        }
    }

    private static void produce(Properties props, String topic, int records) {
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        props.put("batch.size", "524288");
        props.put("buffer.memory", "268435456");
        byte[] value = new byte[1024];
        new Random(17).nextBytes(value);
        AtomicLong errors = new AtomicLong();
        Callback onAck = (meta, exc) -> { if (exc != null) errors.incrementAndGet(); };
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            producer.partitionsFor(topic);  // metadata and the connection before the clock starts
            long cpu = cpuNanos(), start = System.nanoTime();
            for (int i = 0; i < records; i++) {
                producer.send(new ProducerRecord<>(topic, 0, null, value), onAck);
            }
            producer.flush();
            double seconds = (System.nanoTime() - start) / 1e9;
            System.out.printf(Locale.ROOT, "RESULT %d %.6f %d %.3f%n", records, seconds, errors.get(),
                              (cpuNanos() - cpu) / 1e9);
        }
    }

    private static void consume(Properties props, String topic, int records) {
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        props.put("fetch.max.bytes", "52428800");
        props.put("max.partition.fetch.bytes", "16777216");
        props.put("max.poll.records", "100000");
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            TopicPartition tp = new TopicPartition(topic, 0);
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            consumer.position(tp);  // the connection and the offset lookup before the clock starts
            long cpu = cpuNanos(), start = System.nanoTime(), got = 0, bytes = 0;
            while (got < records) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofSeconds(5))) {
                    got++;
                    bytes += r.value().length;
                }
            }
            double seconds = (System.nanoTime() - start) / 1e9;
            System.out.printf(Locale.ROOT, "RESULT %d %.6f %d %.3f%n", got, seconds, bytes, (cpuNanos() - cpu) / 1e9);
        }
    }

    /** CPU time of the whole JVM (every thread: the client's, the compilers', the collector's). */
    private static long cpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
            .getProcessCpuTime();
    }
}

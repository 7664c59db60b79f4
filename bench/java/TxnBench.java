// The Java client's side of bench/transactions.py --java-client: the same records (100 B, one
// partition), plain (the producer's defaults: idempotent, acks=all) or in transactions of
// --per-txn records committed back to back. Prints "RESULT <records> <seconds> <errors>".
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class TxnBench {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], mode = args[1], topic = args[2];
        int records = Integer.parseInt(args[3]), perTxn = Integer.parseInt(args[4]);
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        if (mode.equals("txn")) {
            props.put("transactional.id", "bench-java-" + topic);
        }
        byte[] value = new byte[100];
        new Random(17).nextBytes(value);
        AtomicLong errors = new AtomicLong();
        Callback onAck = (meta, exc) -> { if (exc != null) errors.incrementAndGet(); };
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            if (mode.equals("txn")) {
                producer.initTransactions();
            }
            producer.partitionsFor(topic);  // metadata before the clock starts
            long start = System.nanoTime();
            if (mode.equals("txn")) {
                for (int sent = 0; sent < records; sent += perTxn) {
                    producer.beginTransaction();
                    for (int i = 0; i < perTxn; i++) {
                        producer.send(new ProducerRecord<>(topic, 0, null, value), onAck);
                    }
                    producer.commitTransaction();
                }
            } else {
                for (int i = 0; i < records; i++) {
                    producer.send(new ProducerRecord<>(topic, 0, null, value), onAck);
                }
                producer.flush();
            }
            double seconds = (System.nanoTime() - start) / 1e9;
            System.out.printf(java.util.Locale.ROOT, "RESULT %d %.6f %d%n", records, seconds, errors.get());
        }
    }
}

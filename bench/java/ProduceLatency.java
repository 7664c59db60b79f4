// The Java client's side of bench/diskless.py --java-client: three producers with the
// client's defaults (idempotent, acks=all, 5 requests in flight per connection, linger.ms 5,
// batch.size 16 KiB) offering <rate> records/s in all of 1 KiB to the topic's partitions in
// turn for <seconds>; send-to-acknowledgement latency after a 3 s warm-up. A sixth argument
// sets batch.size and a seventh linger.ms (the settings changed from the defaults, for the
// tuned runs).
// Prints "RESULT <acknowledged> <failures> <p50 ms> <p99 ms> <max ms>".
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class ProduceLatency {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        int rate = Integer.parseInt(args[2]), partitions = Integer.parseInt(args[4]);
        double seconds = Double.parseDouble(args[3]);
        String batchSize = args.length > 5 ? args[5] : null, linger = args.length > 6 ? args[6] : null;
        List<Double> samples = Collections.synchronizedList(new ArrayList<>());
        AtomicLong failures = new AtomicLong();
        long start = System.nanoTime(), warm = start + 3_000_000_000L;
        long end = start + (long) (seconds * 1e9);
        List<Thread> threads = new ArrayList<>();
        for (int n = 0; n < 3; n++) {
            int share = Math.max(1, rate / 3), first = n;
            threads.add(new Thread(() -> run(bootstrap, topic, partitions, share, first, warm, end, samples, failures,
                                             batchSize, linger)));
        }
        threads.forEach(Thread::start);
        for (Thread t : threads) {
            t.join();
        }
        List<Double> sorted = new ArrayList<>(samples);
        Collections.sort(sorted);
        if (sorted.isEmpty()) {
            System.out.println("RESULT 0 " + failures.get() + " 0 0 0");
            return;
        }
        double p50 = sorted.get(sorted.size() / 2), p99 = sorted.get(Math.min(sorted.size() - 1, (int) (sorted.size() * 0.99)));
        System.out.printf("RESULT %d %d %.1f %.1f %.1f%n", sorted.size(), failures.get(), p50, p99, sorted.get(sorted.size() - 1));
    }

    private static void run(String bootstrap, String topic, int partitions, int share, int first, long warm, long end,
                            List<Double> samples, AtomicLong failures, String batchSize, String linger) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        if (batchSize != null) {
            props.put("batch.size", batchSize);
        }
        if (linger != null) {
            props.put("linger.ms", linger);
        }
        byte[] value = new byte[1024];
        new Random(first).nextBytes(value);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            producer.partitionsFor(topic);  // metadata before the clock starts
            long interval = 1_000_000_000L / share, due = System.nanoTime();
            for (int i = first; System.nanoTime() < end; i++) {
                long wait = due - System.nanoTime();
                if (wait > 0) {
                    Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
                }
                long sent = System.nanoTime();
                producer.send(new ProducerRecord<>(topic, i % partitions, null, value), (meta, exc) -> {
                    if (exc != null) {
                        failures.incrementAndGet();
                    } else if (sent >= warm) {
                        samples.add((System.nanoTime() - sent) / 1e6);
                    }
                });
                due += interval;
            }
            producer.flush();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}

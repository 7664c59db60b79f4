package io.strata.spark;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.RandomAccessFile;
import java.net.HttpURLConnection;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.zip.CRC32C;
import java.util.zip.GZIPInputStream;

import com.github.luben.zstd.ZstdInputStreamNoFinalizer;
import net.jpountz.lz4.LZ4FrameInputStream;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;
import org.xerial.snappy.Snappy;

/**
 * Reads one {@link StrataBatch.Slice}: the segment object's bytes in ranged GETs of
 * {@code read.chunk.bytes} (one continuous stream: a batch cut by a GET is completed by the
 * next), walks the RecordBatch v2 headers, checks each kept batch's CRC-32C, decompresses
 * (gzip, snappy, lz4, zstd) and decodes the records of {@code [lo, hi)} into Spark column
 * vectors of Kafka's schema, {@value #ROWS} rows per {@link ColumnarBatch}. Control batches are
 * skipped, and so (read_committed) are transactional batches of the slice's aborted transactions.
 *
 * <p>Keys and values are not copied while decoding: a {@link BytesColumn} row points into the
 * array the record was read (or decompressed) into. While the column batch being filled holds
 * rows of an array, the reader reads and decompresses into other arrays, and the held ones are
 * reused once Spark has moved on to the next batch.
 */
final class SliceReader implements PartitionReader<ColumnarBatch> {
  static final int ROWS = 4096;
  static final int BYTES = 64 << 20;
  private static final int HEADER = 61;
  private static final int LOG_OVERHEAD = 12;
  private static final int CRC_AT = 17;
  private static final int CONTROL = 0x20;
  private static final int TRANSACTIONAL = 0x10;
  private static final int PRODUCER_ID_AT = 43;
  private static final int LOG_APPEND_TIME = 0x08;
  private static final int RETRIES = 3;
  /** Arrays kept for reuse once the batch that held them is released. */
  private static final int SPARES = 4;

  private final StrataBatch.Slice slice;
  private final boolean headers;
  private final ObjectStream in;
  private final CRC32C crc = new CRC32C();
  private final AbortedRanges aborted;

  private byte[] buf = new byte[1 << 20];
  private int have; // bytes in buf
  private int at; // next batch in buf
  private long bufPos; // object position of buf[0]
  private boolean done;

  // the Kafka batch being decoded (records may span several column batches)
  private byte[] recs;
  private int recAt;
  private int recsEnd; // end of the current Kafka batch's records in recs
  private long batchBytes; // key, value and header bytes in the column batch being filled
  private int recsLeft;
  private long batchBase;
  private long batchBaseTs;
  private long batchMaxTs;
  private boolean logAppend;
  private byte[] inflated = new byte[1 << 16];
  // whether rows of the column batch being filled point into buf / inflated
  private boolean bufHeld;
  private boolean inflatedHeld;
  private final ArrayList<byte[]> held = new ArrayList<>(); // arrays left while rows pointed into them
  private final ArrayDeque<byte[]> spares = new ArrayDeque<>();

  private final BytesColumn keyVec;
  private final BytesColumn valueVec;
  private final OnHeapColumnVector offsetVec;
  private final OnHeapColumnVector timestampVec;
  private final OnHeapColumnVector typeVec;
  private final OnHeapColumnVector headerVec;
  private final ColumnarBatch batch;

  SliceReader(StrataBatch.Slice slice, StructType schema) {
    this.slice = slice;
    this.headers = schema.getFieldIndex("headers").isDefined();
    this.aborted = slice.aborted.length > 0 ? new AbortedRanges(slice.aborted) : null;
    keyVec = new BytesColumn(ROWS);
    valueVec = new BytesColumn(ROWS);
    ConstantColumnVector topicVec = new ConstantColumnVector(ROWS, DataTypes.StringType);
    topicVec.setUtf8String(UTF8String.fromString(slice.topic));
    ConstantColumnVector partitionVec = new ConstantColumnVector(ROWS, DataTypes.IntegerType);
    partitionVec.setInt(slice.partition);
    offsetVec = new OnHeapColumnVector(ROWS, DataTypes.LongType);
    timestampVec = new OnHeapColumnVector(ROWS, DataTypes.TimestampType);
    typeVec = new OnHeapColumnVector(ROWS, DataTypes.IntegerType);
    ColumnVector[] vectors;
    if (headers) {
      headerVec = new OnHeapColumnVector(ROWS, schema.apply("headers").dataType());
      vectors = new ColumnVector[] {keyVec, valueVec, topicVec, partitionVec, offsetVec, timestampVec,
          typeVec, headerVec};
    } else {
      headerVec = null;
      vectors = new ColumnVector[] {keyVec, valueVec, topicVec, partitionVec, offsetVec, timestampVec,
          typeVec};
    }
    batch = new ColumnarBatch(vectors);
    long start = slice.start >= 0 ? slice.start : seek();
    bufPos = start;
    in = new ObjectStream(slice.log, slice.key, start, slice.end, slice.chunkBytes);
  }

  @Override
  public boolean next() throws IOException {
    keyVec.reset();
    valueVec.reset();
    release();
    if (headerVec != null) {
      headerVec.reset();
    }
    int rows = 0;
    batchBytes = 0;
    while (rows < ROWS) {
      if (recsLeft > 0) {
        rows = decode(rows);
        if (rows > 0 && batchBytes >= BYTES) {
          break;
        }
        continue;
      }
      if (!nextKafkaBatch()) {
        break;
      }
    }
    batch.setNumRows(rows);
    return rows > 0;
  }

  /** Spark is done with the last column batch: the arrays its rows pointed into may be reused. */
  private void release() {
    bufHeld = false;
    inflatedHeld = false;
    for (byte[] a : held) {
      if (spares.size() < SPARES) {
        spares.add(a);
      }
    }
    held.clear();
  }

  /** An array of at least {@code size} bytes: a spare one, or a new one. */
  private byte[] spare(int size) {
    byte[] a;
    while ((a = spares.poll()) != null) {
      if (a.length >= size) {
        return a;
      }
    }
    return new byte[size];
  }

  @Override
  public ColumnarBatch get() {
    return batch;
  }

  @Override
  public void close() {
    in.close();
    batch.close();
  }

  // -- batches ------------------------------------------------------------------------------

  /** Moves to the next Kafka batch with records in [lo, hi); false at the end of the slice. */
  private boolean nextKafkaBatch() throws IOException {
    while (!done) {
      if (have - at < HEADER && !fill(HEADER)) {
        return false;
      }
      long base = getLong(buf, at);
      int length = getInt(buf, at + 8);
      byte magic = buf[at + 16];
      if (magic != 2 || length < HEADER - LOG_OVERHEAD) {
        throw new IllegalStateException("not a RecordBatch v2 at byte " + (bufPos + at) + " of object '"
            + slice.key + "' (magic " + magic + ", length " + length + ")");
      }
      long whole = LOG_OVERHEAD + (long) length;
      if (bufPos + at + whole > slice.end) { // also a corrupt length: no buffer is sized by it
        throw new IllegalStateException("object '" + slice.key + "' ends inside a batch at byte "
            + (bufPos + at) + " (" + (slice.end - bufPos - at) + " of " + whole
            + " bytes): the segment object is truncated");
      }
      int size = (int) whole;
      if (have - at < size && !fill(size)) {
        return false;
      }
      int attributes = getShort(buf, at + 21);
      long last = base + getInt(buf, at + 23);
      int pos = at;
      at += size;
      if (last < slice.lo || (attributes & CONTROL) != 0) {
        continue;
      }
      if (base >= slice.hi) {
        done = true;
        return false;
      }
      if (aborted != null && (attributes & TRANSACTIONAL) != 0
          && aborted.holds(getLong(buf, pos + PRODUCER_ID_AT), base)) {
        continue;
      }
      crc.reset();
      crc.update(buf, pos + CRC_AT + 4, size - CRC_AT - 4);
      if ((int) crc.getValue() != getInt(buf, pos + CRC_AT)) {
        throw new IllegalStateException("CRC mismatch in the batch at offset " + base + " of object '"
            + slice.key + "': the segment object is corrupt");
      }
      batchBase = base;
      batchBaseTs = getLong(buf, pos + 27);
      batchMaxTs = getLong(buf, pos + 35);
      logAppend = (attributes & LOG_APPEND_TIME) != 0;
      recsLeft = getInt(buf, pos + 57);
      int codec = attributes & 0x07;
      if (codec == 0) {
        recs = buf;
        recAt = pos + HEADER;
        recsEnd = pos + size;
      } else {
        recsEnd = decompress(codec, pos + HEADER, size - HEADER, base);
        recs = inflated;
        recAt = 0;
      }
      return true;
    }
    return false;
  }

  /**
   * Makes {@code need} bytes from {@code at} available in {@code buf}; false at the end of the
   * slice (after checking that what is left is not a cut batch).
   */
  private boolean fill(int need) throws IOException {
    if (bufHeld) { // rows of the column batch point into buf: go on in another array
      byte[] next = spare(Math.max(buf.length, need));
      System.arraycopy(buf, at, next, 0, have - at);
      held.add(buf);
      buf = next;
      bufHeld = false;
      have -= at;
      bufPos += at;
      at = 0;
    } else if (at > 0) { // only called between Kafka batches: the batch being decoded is done
      System.arraycopy(buf, at, buf, 0, have - at);
      have -= at;
      bufPos += at;
      at = 0;
    }
    if (need > buf.length - at) {
      byte[] bigger = new byte[Math.max(need + at, buf.length * 2)];
      System.arraycopy(buf, 0, bigger, 0, have);
      buf = bigger;
    }
    while (have - at < need) {
      int n = in.read(buf, have, buf.length - have);
      if (n < 0) {
        int left = have - at;
        if (left < HEADER && bufPos + have >= slice.end) {
          done = true;
          return false; // a few stray bytes at the very end: nothing to decode
        }
        throw new IllegalStateException("object '" + slice.key + "' ends inside a batch at byte "
            + (bufPos + at) + " (" + left + " of " + need + " bytes): the segment object is truncated");
      }
      have += n;
    }
    return true;
  }

  /** Decompresses {@code buf[off, off + len)} into {@code inflated}; returns the length. */
  private int decompress(int codec, int off, int len, long base) throws IOException {
    if (inflatedHeld) { // rows of the column batch point into it: decompress into another array
      held.add(inflated);
      inflated = spare(inflated.length);
      inflatedHeld = false;
    }
    try {
      switch (codec) {
        case 1:
          return drain(new GZIPInputStream(new ByteArrayInputStream(buf, off, len), 64 * 1024));
        case 2:
          return snappy(off, len);
        case 3:
          return drain(new LZ4FrameInputStream(new ByteArrayInputStream(buf, off, len)));
        case 4:
          return drain(new ZstdInputStreamNoFinalizer(new ByteArrayInputStream(buf, off, len)));
        default:
          throw new IllegalStateException("batch at offset " + base + " of object '" + slice.key
              + "': unknown compression codec " + codec);
      }
    } catch (IOException e) {
      throw new IllegalStateException("batch at offset " + base + " of object '" + slice.key
          + "': cannot decompress (" + e + ")", e);
    }
  }

  private int drain(InputStream stream) throws IOException {
    try (InputStream s = stream) {
      int n = 0;
      while (true) {
        if (n == inflated.length) {
          inflated = java.util.Arrays.copyOf(inflated, n * 2);
        }
        int r = s.read(inflated, n, inflated.length - n);
        if (r < 0) {
          return n;
        }
        n += r;
      }
    }
  }

  /** Raw snappy, or the xerial framing Kafka's Java client writes (header, then length-prefixed blocks). */
  private int snappy(int off, int len) throws IOException {
    boolean xerial = len >= 16 && (buf[off] & 0xff) == 0x82 && buf[off + 1] == 'S' && buf[off + 2] == 'N'
        && buf[off + 3] == 'A' && buf[off + 4] == 'P' && buf[off + 5] == 'P' && buf[off + 6] == 'Y'
        && buf[off + 7] == 0;
    if (!xerial) {
      ensureInflated(Snappy.uncompressedLength(buf, off, len));
      return Snappy.uncompress(buf, off, len, inflated, 0);
    }
    int p = off + 16;
    int stop = off + len;
    int n = 0;
    while (p + 4 <= stop) {
      int block = getInt(buf, p);
      p += 4;
      int raw = Snappy.uncompressedLength(buf, p, block);
      ensureInflated(n + raw);
      n += Snappy.uncompress(buf, p, block, inflated, n);
      p += block;
    }
    return n;
  }

  private void ensureInflated(int size) {
    if (inflated.length < size) {
      inflated = java.util.Arrays.copyOf(inflated, Math.max(size, inflated.length * 2));
    }
  }

  // -- records ------------------------------------------------------------------------------

  /**
   * Decodes records of the current Kafka batch into rows from {@code row}; returns the row count.
   * A column batch ends at {@value #ROWS} rows or once its keys, values and headers pass
   * {@value #BYTES} bytes (Spark keeps a vector's bytes in one array).
   */
  private int decode(int row) {
    byte[] b = recs;
    if (b == buf) {
      bufHeld = true;
    } else {
      inflatedHeld = true;
    }
    while (recsLeft > 0 && row < ROWS && (row == 0 || batchBytes < BYTES)) {
      recsLeft--;
      int length = (int) varlong(b, recsEnd);
      int next = recAt + length;
      if (length < 0 || next > recsEnd) {
        throw malformed("a record runs past the end of its batch");
      }
      recAt++; // attributes
      long tsDelta = varlong(b, next);
      long offset = batchBase + varlong(b, next);
      if (offset < slice.lo) {
        recAt = next;
        continue;
      }
      if (offset >= slice.hi) {
        recsLeft = 0;
        done = true;
        break;
      }
      bytesField(b, keyVec, row, next);
      bytesField(b, valueVec, row, next);
      offsetVec.putLong(row, offset);
      timestampVec.putLong(row, (logAppend ? batchMaxTs : batchBaseTs + tsDelta) * 1000L);
      typeVec.putInt(row, logAppend ? 1 : 0);
      if (headerVec != null) {
        headers(b, row, next);
      }
      recAt = next;
      row++;
    }
    return row;
  }

  private IllegalStateException malformed(String what) {
    return new IllegalStateException("the batch at offset " + batchBase + " of object '" + slice.key
        + "' is malformed: " + what);
  }

  private void headers(byte[] b, int row, int next) {
    int count = (int) varlong(b, next);
    if (count > next - recAt) {
      throw malformed("a record has more headers than bytes");
    }
    WritableColumnVector structs = headerVec.arrayData();
    WritableColumnVector keys = structs.getChild(0);
    WritableColumnVector values = structs.getChild(1);
    int first = structs.getElementsAppended();
    headerVec.putArray(row, first, Math.max(count, 0));
    if (count > 0) {
      structs.reserve(first + count);
      keys.reserve(first + count);
      values.reserve(first + count);
    }
    for (int i = 0; i < count; i++) {
      structs.putNotNull(first + i);
      bytesField(b, keys, first + i, next);
      bytesField(b, values, first + i, next);
    }
    structs.addElementsAppended(Math.max(count, 0));
  }

  /** A varint length, then that many bytes (a length of -1: null): {@code vec}'s row points at them. */
  private void bytesField(byte[] b, BytesColumn vec, int row, int next) {
    int len = fieldLength(b, next);
    if (len < 0) {
      vec.putNull(row);
    } else {
      vec.put(row, b, recAt, len);
      recAt += len;
    }
  }

  /** A varint length, then that many bytes (a length of -1: null), copied into {@code vec} at {@code row}. */
  private void bytesField(byte[] b, WritableColumnVector vec, int row, int next) {
    int len = fieldLength(b, next);
    if (len < 0) {
      vec.putNull(row);
    } else {
      vec.putByteArray(row, b, recAt, len);
      recAt += len;
    }
  }

  /** A field's varint length (-1: null), its bytes checked to end inside the record and counted. */
  private int fieldLength(byte[] b, int next) {
    int len = (int) varlong(b, next);
    if (len > next - recAt) {
      throw malformed("a field runs past the end of its record");
    }
    batchBytes += Math.max(len, 0);
    return len;
  }

  /** A zig-zag varint (Kafka's record fields) at {@code recAt}, before {@code limit}. */
  private long varlong(byte[] b, int limit) {
    long raw = 0;
    int shift = 0;
    while (true) {
      if (recAt >= limit) {
        throw malformed("a record ends inside a varint");
      }
      byte x = b[recAt++];
      raw |= (long) (x & 0x7f) << shift;
      if (x >= 0) {
        break;
      }
      shift += 7;
      if (shift > 63) {
        throw malformed("a varint is longer than 10 bytes");
      }
    }
    return (raw >>> 1) ^ -(raw & 1);
  }

  // -- the offset index ---------------------------------------------------------------------

  /** Byte position to start reading at {@code lo}, from the segment's offset index (0 if none). */
  private long seek() {
    if (slice.lo <= slice.base) {
      return 0;
    }
    byte[] raw;
    try (ObjectStream s = new ObjectStream(slice.offsetIndex, slice.key, 0, Long.MAX_VALUE / 2, 0)) {
      raw = s.readAll();
    } catch (IOException | RuntimeException e) {
      return 0; // indexes are derived data: without one, read from the start
    }
    long rel = slice.lo - slice.base;
    long best = 0;
    for (int i = 0; i + 8 <= raw.length; i += 8) {
      long r = getInt(raw, i);
      long p = getInt(raw, i + 4) & 0xffffffffL;
      if (r > rel || p > slice.size) {
        break;
      }
      best = p;
    }
    return best;
  }

  /**
   * The aborted transactions of a slice, by producer id: a transactional batch is aborted when a
   * range of its producer holds its base offset (a batch never straddles a transaction's bounds,
   * and one producer's transactions never overlap). Kafka's consumer decides the same with its
   * queue of aborted first offsets and the ABORT markers ({@code CompletedFetch}).
   */
  static final class AbortedRanges {
    private final java.util.HashMap<Long, long[]> byProducer = new java.util.HashMap<>();

    AbortedRanges(long[] triples) {
      java.util.HashMap<Long, java.util.List<long[]>> spans = new java.util.HashMap<>();
      for (int i = 0; i + 2 < triples.length; i += 3) {
        spans.computeIfAbsent(triples[i], k -> new java.util.ArrayList<>())
            .add(new long[] {triples[i + 1], triples[i + 2]});
      }
      for (java.util.Map.Entry<Long, java.util.List<long[]>> e : spans.entrySet()) {
        java.util.List<long[]> list = e.getValue();
        list.sort((x, y) -> Long.compare(x[0], y[0]));
        long[] flat = new long[2 * list.size()]; // first0, last0, first1, last1, ...
        for (int i = 0; i < list.size(); i++) {
          flat[2 * i] = list.get(i)[0];
          flat[2 * i + 1] = list.get(i)[1];
        }
        byProducer.put(e.getKey(), flat);
      }
    }

    boolean holds(long producerId, long offset) {
      long[] flat = byProducer.get(producerId);
      if (flat == null) {
        return false;
      }
      int lo = 0;
      int hi = flat.length / 2 - 1;
      int found = -1; // the last range whose first offset is <= offset
      while (lo <= hi) {
        int mid = (lo + hi) >>> 1;
        if (flat[2 * mid] <= offset) {
          found = mid;
          lo = mid + 1;
        } else {
          hi = mid - 1;
        }
      }
      return found >= 0 && flat[2 * found + 1] >= offset;
    }
  }

  static long getLong(byte[] b, int i) {
    return ((long) getInt(b, i) << 32) | (getInt(b, i + 4) & 0xffffffffL);
  }

  static int getInt(byte[] b, int i) {
    return ((b[i] & 0xff) << 24) | ((b[i + 1] & 0xff) << 16) | ((b[i + 2] & 0xff) << 8) | (b[i + 3] & 0xff);
  }

  static int getShort(byte[] b, int i) {
    return ((b[i] & 0xff) << 8) | (b[i + 1] & 0xff);
  }

  /**
   * Bytes {@code [start, end)} of an object as one stream, fetched in ranged GETs of at most
   * {@code chunk} bytes; a GET that fails part-way is resumed where it stopped (3 retries).
   * {@code where} is a presigned http(s) URL or a file: URL.
   */
  /** Trust for https endpoints: the JVM's, plus the PEM bundle in AWS_CA_BUNDLE (as boto3 does). */
  static final class Tls {
    static final javax.net.ssl.SSLSocketFactory FACTORY = load(System.getenv("AWS_CA_BUNDLE"));

    private static javax.net.ssl.SSLSocketFactory load(String bundle) {
      if (bundle == null || bundle.isEmpty()) {
        return null;
      }
      try (InputStream in = new java.io.FileInputStream(bundle)) {
        java.security.KeyStore store = java.security.KeyStore.getInstance(java.security.KeyStore.getDefaultType());
        store.load(null, null);
        int i = 0;
        for (java.security.cert.Certificate c
            : java.security.cert.CertificateFactory.getInstance("X.509").generateCertificates(in)) {
          store.setCertificateEntry("aws-ca-bundle-" + i++, c);
        }
        javax.net.ssl.TrustManagerFactory trust =
            javax.net.ssl.TrustManagerFactory.getInstance(javax.net.ssl.TrustManagerFactory.getDefaultAlgorithm());
        trust.init(store);
        javax.net.ssl.SSLContext context = javax.net.ssl.SSLContext.getInstance("TLS");
        context.init(null, trust.getTrustManagers(), null);
        return context.getSocketFactory();
      } catch (IOException | java.security.GeneralSecurityException e) {
        throw new IllegalStateException("AWS_CA_BUNDLE=" + bundle + " is not a readable PEM bundle: " + e, e);
      }
    }
  }

  static final class ObjectStream implements AutoCloseable {
    private final String where;
    private final String key;
    private long pos;
    private long end;
    private final long chunk;
    private InputStream body;
    private HttpURLConnection conn;
    private long bodyEnd; // end of the current GET's body
    private boolean bodyShort; // the object ended inside the current GET's range
    private RandomAccessFile file;

    /** {@code chunk} of 0 or less: the whole range in one GET. */
    ObjectStream(String where, String key, long start, long end, long chunk) {
      this.where = where;
      this.key = key;
      this.pos = start;
      this.end = end;
      this.chunk = chunk > 0 ? chunk : Long.MAX_VALUE / 2;
    }

    /** Up to {@code len} bytes into {@code b}; -1 at the end. */
    int read(byte[] b, int off, int len) throws IOException {
      if (where.startsWith("file:")) {
        return readFile(b, off, len);
      }
      for (int attempt = 0; ; attempt++) {
        try {
          while (true) {
            if (pos >= end) {
              return -1;
            }
            if (body == null && !open()) {
              end = pos; // the object ends here
              return -1;
            }
            if (bodyEnd <= pos) { // an empty body: the object ends here
              closeBody();
              end = pos;
              return -1;
            }
            if (pos >= bodyEnd) {
              closeBody();
              continue;
            }
            int n = body.read(b, off, (int) Math.min(len, bodyEnd - pos));
            if (n < 0) {
              throw new IOException("the object store closed the response early");
            }
            pos += n;
            if (pos >= bodyEnd) {
              closeBody();
              if (bodyShort) {
                end = pos; // the object is shorter than the range asked for
              }
            }
            return n;
          }
        } catch (javax.net.ssl.SSLException e) { // not a passing network fault: no retry
          closeBody();
          throw new IOException("TLS with the object store failed reading '" + key + "' (" + e.getMessage()
              + "); if it uses a private certificate authority, set AWS_CA_BUNDLE on the executors "
              + "(a PEM file) or add the authority to the JVM's truststore", e);
        } catch (IOException e) {
          closeBody();
          if (attempt >= RETRIES) {
            throw new IOException("reading '" + key + "' from the object store failed after " + RETRIES
                + " retries (" + e.getMessage() + "); check s3.endpoint and the network", e);
          }
          try {
            Thread.sleep(200L << (2 * attempt));
          } catch (InterruptedException ie) {
            Thread.currentThread().interrupt();
            throw e;
          }
        }
      }
    }

    /** Opens a GET at pos; false when the object ends before it (416). */
    private boolean open() throws IOException {
      long stop = Math.min(end, pos + chunk);
      conn = (HttpURLConnection) URI.create(where).toURL().openConnection();
      if (conn instanceof javax.net.ssl.HttpsURLConnection && Tls.FACTORY != null) {
        ((javax.net.ssl.HttpsURLConnection) conn).setSSLSocketFactory(Tls.FACTORY);
      }
      conn.setConnectTimeout(10_000);
      conn.setReadTimeout(60_000);
      conn.setRequestProperty("Range", "bytes=" + pos + "-" + (stop - 1));
      int status = conn.getResponseCode();
      if (status == 206) {
        long length = conn.getContentLengthLong();
        body = conn.getInputStream();
        bodyEnd = length < 0 ? stop : Math.min(stop, pos + length);
        bodyShort = bodyEnd < stop;
        return true;
      }
      if (status == 200) { // the store ignored the range: the whole object, read on to the end
        long length = conn.getContentLengthLong();
        body = conn.getInputStream();
        if (length >= 0 && pos >= length) {
          closeBody();
          return false;
        }
        body.skipNBytes(pos);
        bodyEnd = length < 0 ? end : Math.min(end, length);
        bodyShort = bodyEnd < end;
        return true;
      }
      String detail = errorBody();
      conn.disconnect();
      conn = null;
      if (status == 416) {
        return false;
      }
      if (status == 404) {
        throw new IllegalStateException("no object '" + key + "' in the bucket (" + detail
            + "): the manifest lists a segment the bucket does not hold");
      }
      if (status == 403) {
        throw new IllegalStateException("reading '" + key + "' was refused (HTTP 403: " + detail
            + "); the URL signed at planning may have expired (re-run the query) or the credentials "
            + "may not read the bucket");
      }
      throw new IOException("HTTP " + status + " for '" + key + "': " + detail);
    }

    private String errorBody() {
      try (InputStream e = conn.getErrorStream()) {
        if (e == null) {
          return "no body";
        }
        String text = new String(e.readNBytes(400), StandardCharsets.UTF_8);
        int c = text.indexOf("<Code>");
        int d = text.indexOf("</Code>");
        return c >= 0 && d > c ? text.substring(c + 6, d) : text.trim();
      } catch (IOException ignored) {
        return "no body";
      }
    }

    private int readFile(byte[] b, int off, int len) throws IOException {
      if (file == null) {
        try {
          file = new RandomAccessFile(new java.io.File(URI.create(where)), "r");
        } catch (java.io.FileNotFoundException e) {
          throw new IllegalStateException("no object '" + key + "' in the bucket (" + where
              + "): the manifest lists a segment the store does not hold");
        }
      }
      if (pos >= end) {
        return -1;
      }
      file.seek(pos);
      int n = file.read(b, off, (int) Math.min(len, end - pos));
      if (n > 0) {
        pos += n;
      }
      return n;
    }

    byte[] readAll() throws IOException {
      java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
      byte[] b = new byte[64 * 1024];
      int n;
      while ((n = read(b, 0, b.length)) > 0) {
        out.write(b, 0, n);
      }
      return out.toByteArray();
    }

    private void closeBody() {
      if (body != null) {
        try {
          body.close();
        } catch (IOException ignored) {
          // a broken connection: nothing to release
        }
        body = null;
      }
      conn = null;
    }

    @Override
    public void close() {
      if (body != null && pos < bodyEnd && conn != null) {
        conn.disconnect(); // stopped early: do not drain the rest of the range
      }
      closeBody();
      if (file != null) {
        try {
          file.close();
        } catch (IOException ignored) {
          // read-only
        }
        file = null;
      }
    }
  }
}

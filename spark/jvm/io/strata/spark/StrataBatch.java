package io.strata.spark;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import net.razorvine.pickle.Unpickler;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.execution.datasources.v2.python.PythonInputPartition;
import org.apache.spark.sql.execution.datasources.v2.python.PythonStreamingInputPartition;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * A batch read planned by the Python source (and, through {@link StrataStream}, each
 * micro-batch of a stream). Its segment slices (pickled as
 * {@code spark.catalog._segment_slice(json)}) become {@link Slice}s read by {@link SliceReader};
 * any other partition (the broker's part) is read by the Python reader. When every partition is
 * a slice, Spark gets column vectors; otherwise rows from both.
 */
final class StrataBatch implements Batch {
  private static final String PICKLE_MODULE = "spark.catalog";
  private static final String PICKLE_NAME = "_segment_slice";

  static {
    // the Python slice pickles as a call of spark.catalog._segment_slice with its JSON form
    Unpickler.registerConstructor(PICKLE_MODULE, PICKLE_NAME, args -> new SliceJson((String) args[0]));
  }

  private final Batch python;
  private final StructType schema;
  private boolean columnar;

  StrataBatch(Batch python, StructType schema) {
    this.python = python;
    this.schema = schema;
  }

  @Override
  public InputPartition[] planInputPartitions() {
    InputPartition[] out = slices(python.planInputPartitions());
    columnar = allSlices(out);
    return out;
  }

  /** The planned partitions with the segment slices among them made {@link Slice}s. */
  static InputPartition[] slices(InputPartition[] planned) {
    List<InputPartition> out = new ArrayList<>(planned.length);
    for (InputPartition p : planned) {
      Slice slice = null;
      if (p instanceof PythonInputPartition) {
        slice = toSlice(((PythonInputPartition) p).pickedPartition());
      } else if (p instanceof PythonStreamingInputPartition) {
        slice = toSlice(((PythonStreamingInputPartition) p).pickedPartition());
      }
      out.add(slice != null ? slice : p);
    }
    return out.toArray(new InputPartition[0]);
  }

  /** Whether Spark can take column batches: every partition is a slice (a scan is all or nothing). */
  static boolean allSlices(InputPartition[] partitions) {
    boolean all = partitions.length > 0;
    for (InputPartition p : partitions) {
      all &= p instanceof Slice;
    }
    return all;
  }

  private static Slice toSlice(byte[] pickled) {
    Object value;
    try {
      Unpickler unpickler = new Unpickler();
      value = unpickler.loads(pickled);
      unpickler.close();
    } catch (Exception e) {
      return null; // not one of ours (a broker slice, an empty plan): the Python reader's
    }
    if (!(value instanceof SliceJson)) {
      return null;
    }
    try {
      return Slice.fromJson(((SliceJson) value).json);
    } catch (IOException e) {
      throw new IllegalStateException("strata: cannot read a planned slice: " + e.getMessage(), e);
    }
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new Factory(python.createReaderFactory(), schema, columnar);
  }

  private static final class SliceJson {
    final String json;

    SliceJson(String json) {
      this.json = json;
    }
  }

  /** Records {@code [lo, hi)} of one segment object, in bytes {@code [start, end)}. */
  static final class Slice implements InputPartition {
    private static final long serialVersionUID = 1L;
    private static final ObjectMapper JSON = new ObjectMapper();

    final String topic;
    final int partition;
    final String key;
    final long base;
    final long size;
    final long lo;
    final long hi;
    final long start; // -1: seek with the offset index
    final long end;
    final String log; // where the JVM reads the .log: a presigned https URL or a file: URL
    final String offsetIndex; // where the .index is; "" when start is known (no seek)
    final long chunkBytes; // GET size; 0: the whole range in one GET
    // read_committed: aborted transactions as (producer id, first offset, last offset) triples
    final long[] aborted;

    private Slice(JsonNode n) {
      topic = n.get("topic").asText();
      partition = n.get("partition").asInt();
      key = n.get("key").asText();
      base = n.get("base").asLong();
      size = n.get("size").asLong();
      lo = n.get("lo").asLong();
      hi = n.get("hi").asLong();
      start = n.get("start").isNull() ? -1 : n.get("start").asLong();
      end = n.get("end").asLong();
      JsonNode where = n.get("jvm");
      if (where == null || where.isNull()) {
        throw new IllegalStateException("strata: a slice was planned without its object locations");
      }
      log = where.get("log").asText();
      offsetIndex = where.get("index").asText();
      chunkBytes = where.get("chunk").asLong();
      JsonNode txns = n.get("aborted");
      int count = txns == null || txns.isNull() ? 0 : txns.size();
      aborted = new long[3 * count];
      for (int i = 0; i < count; i++) {
        JsonNode t = txns.get(i);
        if (t == null || t.size() != 3) {
          throw new IllegalStateException("strata: an aborted transaction of a slice is not [pid, first, last]");
        }
        for (int j = 0; j < 3; j++) {
          aborted[3 * i + j] = t.get(j).asLong();
        }
      }
    }

    static Slice fromJson(String json) throws IOException {
      return new Slice(JSON.readTree(json));
    }

    @Override
    public String toString() {
      return "Slice(" + topic + "-" + partition + " [" + lo + ", " + hi + ") of " + key + ")";
    }
  }

  static final class Factory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;
    private final PartitionReaderFactory python;
    private final StructType schema;
    private final boolean columnar;

    Factory(PartitionReaderFactory python, StructType schema, boolean columnar) {
      this.python = python;
      this.schema = schema;
      this.columnar = columnar;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      if (partition instanceof Slice) {
        return new Rows(new SliceReader((Slice) partition, schema));
      }
      return python.createReader(partition);
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
      return new SliceReader((Slice) partition, schema);
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
      return columnar && partition instanceof Slice;
    }
  }

  /** Rows of a slice, for a plan that mixes slices with the Python reader's partitions. */
  static final class Rows implements PartitionReader<InternalRow> {
    private final SliceReader batches;
    private java.util.Iterator<InternalRow> rows = java.util.Collections.emptyIterator();

    Rows(SliceReader batches) {
      this.batches = batches;
    }

    @Override
    public boolean next() throws IOException {
      while (!rows.hasNext()) {
        if (!batches.next()) {
          return false;
        }
        rows = batches.get().rowIterator();
      }
      return true;
    }

    @Override
    public InternalRow get() {
      return rows.next();
    }

    @Override
    public void close() throws IOException {
      batches.close();
    }
  }
}

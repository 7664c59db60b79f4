package io.strata.spark;

import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.types.StructType;

/**
 * The Python source's micro-batch stream with its segment slices read in the JVM. Offsets,
 * limits ({@code maxOffsetsPerTrigger}), {@code Trigger.AvailableNow} and commits are the Python
 * stream's; only what each micro-batch reads from the bucket changes hands.
 */
class StrataStream implements MicroBatchStream {
  final MicroBatchStream python;
  private final StructType schema;
  private boolean columnar;

  StrataStream(MicroBatchStream python, StructType schema) {
    this.python = python;
    this.schema = schema;
  }

  /** Wraps {@code python} keeping the interfaces Spark checks for (admission control, AvailableNow). */
  static MicroBatchStream wrap(MicroBatchStream python, StructType schema) {
    if (python instanceof SupportsTriggerAvailableNow) {
      return new AvailableNow(python, schema);
    }
    if (python instanceof SupportsAdmissionControl) {
      return new Admission(python, schema);
    }
    return new StrataStream(python, schema);
  }

  @Override
  public Offset initialOffset() {
    return python.initialOffset();
  }

  @Override
  public Offset latestOffset() {
    return python.latestOffset();
  }

  @Override
  public InputPartition[] planInputPartitions(Offset start, Offset end) {
    InputPartition[] out = StrataBatch.slices(python.planInputPartitions(start, end));
    columnar = StrataBatch.allSlices(out); // Spark asks for the factory right after, per micro-batch
    return out;
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new StrataBatch.Factory(python.createReaderFactory(), schema, columnar);
  }

  @Override
  public Offset deserializeOffset(String json) {
    return python.deserializeOffset(json);
  }

  @Override
  public void commit(Offset end) {
    python.commit(end);
  }

  @Override
  public void stop() {
    python.stop();
  }

  static class Admission extends StrataStream implements SupportsAdmissionControl {
    Admission(MicroBatchStream python, StructType schema) {
      super(python, schema);
    }

    @Override
    public ReadLimit getDefaultReadLimit() {
      return ((SupportsAdmissionControl) python).getDefaultReadLimit();
    }

    @Override
    public Offset latestOffset(Offset start, ReadLimit limit) {
      return ((SupportsAdmissionControl) python).latestOffset(start, limit);
    }

    @Override
    public Offset reportLatestOffset() {
      return ((SupportsAdmissionControl) python).reportLatestOffset();
    }
  }

  static final class AvailableNow extends Admission implements SupportsTriggerAvailableNow {
    AvailableNow(MicroBatchStream python, StructType schema) {
      super(python, schema);
    }

    @Override
    public void prepareForTriggerAvailableNow() {
      ((SupportsTriggerAvailableNow) python).prepareForTriggerAvailableNow();
    }
  }
}

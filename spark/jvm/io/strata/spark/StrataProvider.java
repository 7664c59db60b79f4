package io.strata.spark;

import java.util.HashMap;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code spark.read.format("strata")} with the Strata jar on the classpath.
 *
 * <p>Planning stays with the Python source ({@code spark.StrataDataSource}, registered as
 * {@value #PYTHON_NAME} when this class is loadable): options, manifests, offsets, timestamps,
 * splits and errors are the Python planner's. What changes is who reads: the slices of segment
 * objects are read and decoded here, in the executor JVM, straight into Spark column vectors, with
 * no Python worker and no Arrow hand-over, in batch reads and in every micro-batch of a stream.
 * Slices the Python planner gives the broker (the not-yet-tiered tail of a complete snapshot, a
 * stream that has caught up) stay with the Python reader.
 */
public final class StrataProvider implements TableProvider, DataSourceRegister {
  /** The name the Python source registers under when this jar is loaded. */
  public static final String PYTHON_NAME = "strata_python";
  /** Option passed to the Python planner: attach object locations readable from the JVM. */
  static final String JVM_OPTION = "strata.jvm";

  private PythonDataSourceV2 delegate;

  @Override
  public String shortName() {
    return "strata";
  }

  private PythonDataSourceV2 delegate() {
    if (delegate == null) {
      if (!SparkSession.active().sessionState().dataSourceManager().dataSourceExists(PYTHON_NAME)) {
        throw new IllegalStateException(
            "the strata source plans reads in Python: register it first with "
                + "`from spark import StrataDataSource; spark.dataSource.register(StrataDataSource)`");
      }
      PythonDataSourceV2 d = new PythonDataSourceV2();
      d.setShortName(PYTHON_NAME);
      delegate = d;
    }
    return delegate;
  }

  private static CaseInsensitiveStringMap marked(Map<String, String> options) {
    Map<String, String> out = new HashMap<>(options);
    out.put(JVM_OPTION, "true");
    return new CaseInsensitiveStringMap(out);
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return delegate().inferSchema(marked(options));
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new StrataTable(delegate().getTable(schema, partitioning, marked(properties)));
  }

  @Override
  public boolean supportsExternalMetadata() {
    return delegate().supportsExternalMetadata();
  }

  private static final String[] KAFKA_COLUMNS = {"key:binary", "value:binary", "topic:string",
      "partition:int", "offset:bigint", "timestamp:timestamp", "timestampType:int",
      "headers:array<struct<key:string,value:binary>>"};

  /** Whether {@code schema} is Spark's Kafka schema, with or without headers: what SliceReader fills. */
  static boolean kafkaSchema(StructType schema) {
    StructField[] fields = schema.fields();
    if (fields.length != KAFKA_COLUMNS.length && fields.length != KAFKA_COLUMNS.length - 1) {
      return false;
    }
    for (int i = 0; i < fields.length; i++) {
      if (!(fields[i].name() + ":" + fields[i].dataType().catalogString()).equals(KAFKA_COLUMNS[i])) {
        return false;
      }
    }
    return true;
  }

  /** The Python source's table, with batch reads of bucket slices done in the JVM. */
  static final class StrataTable implements SupportsRead {
    private final Table python;

    StrataTable(Table python) {
      this.python = python;
    }

    @Override
    public String name() {
      return "strata";
    }

    @Override
    public StructType schema() {
      return python.schema();
    }

    @Override
    public Set<TableCapability> capabilities() {
      return python.capabilities();
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      ScanBuilder builder = ((SupportsRead) python).newScanBuilder(marked(options));
      return () -> new StrataScan(builder.build());
    }
  }

  static final class StrataScan implements Scan {
    private final Scan python;

    StrataScan(Scan python) {
      this.python = python;
    }

    @Override
    public StructType readSchema() {
      return python.readSchema();
    }

    @Override
    public String description() {
      return "strata (segments read in the JVM)";
    }

    @Override
    public Batch toBatch() {
      Batch batch = python.toBatch();
      // a schema the user gave that is not Kafka's: the Python reader rejects it, with Spark's error
      return kafkaSchema(readSchema()) ? new StrataBatch(batch, readSchema()) : batch;
    }

    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
      MicroBatchStream stream = python.toMicroBatchStream(checkpointLocation);
      return kafkaSchema(readSchema()) ? StrataStream.wrap(stream, readSchema()) : stream;
    }

    @Override
    public CustomMetric[] supportedCustomMetrics() {
      return python.supportedCustomMetrics();
    }
  }
}

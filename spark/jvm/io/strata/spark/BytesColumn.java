package io.strata.spark;

import java.util.Arrays;

import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A binary column (a record's key or value) that points into the bytes {@link SliceReader}
 * read, rather than holding a copy of them: each row is an array, an offset and a length (a
 * length of -1 is null). Spark's {@code getBinary} copies a row's bytes out anyway, so the
 * copy {@code OnHeapColumnVector.putByteArray} makes while decoding was a second one.
 *
 * <p>The arrays must not change until the batch is released (the reader's next {@code next()});
 * {@link SliceReader} writes into a different array while one holds rows of the current batch.
 */
final class BytesColumn extends ColumnVector {
  private byte[][] arrays;
  private int[] offsets;
  private int[] lengths;
  private int nulls;

  BytesColumn(int capacity) {
    super(DataTypes.BinaryType);
    arrays = new byte[capacity][];
    offsets = new int[capacity];
    lengths = new int[capacity];
  }

  /** Called before a batch is filled again (rows past the new batch's count are never read). */
  void reset() {
    nulls = 0;
  }

  void put(int row, byte[] array, int offset, int length) {
    arrays[row] = array;
    offsets[row] = offset;
    lengths[row] = length;
  }

  void putNull(int row) {
    arrays[row] = null;
    lengths[row] = -1;
    nulls++;
  }

  @Override
  public byte[] getBinary(int rowId) {
    int length = lengths[rowId];
    if (length < 0) {
      return null;
    }
    int offset = offsets[rowId];
    return Arrays.copyOfRange(arrays[rowId], offset, offset + length);
  }

  @Override
  public boolean isNullAt(int rowId) {
    return lengths[rowId] < 0;
  }

  @Override
  public boolean hasNull() {
    return nulls > 0;
  }

  @Override
  public int numNulls() {
    return nulls;
  }

  /** Kept: the reader fills this column again for its next batch, and closes it with the reader. */
  @Override
  public void closeIfFreeable() {
  }

  @Override
  public void close() {
    Arrays.fill(arrays, null);
  }

  private static UnsupportedOperationException notBinary() {
    return new UnsupportedOperationException("a binary column (key or value) has only binary values");
  }

  @Override
  public boolean getBoolean(int rowId) {
    throw notBinary();
  }

  @Override
  public byte getByte(int rowId) {
    throw notBinary();
  }

  @Override
  public short getShort(int rowId) {
    throw notBinary();
  }

  @Override
  public int getInt(int rowId) {
    throw notBinary();
  }

  @Override
  public long getLong(int rowId) {
    throw notBinary();
  }

  @Override
  public float getFloat(int rowId) {
    throw notBinary();
  }

  @Override
  public double getDouble(int rowId) {
    throw notBinary();
  }

  @Override
  public ColumnarArray getArray(int rowId) {
    throw notBinary();
  }

  @Override
  public ColumnarMap getMap(int ordinal) {
    throw notBinary();
  }

  @Override
  public Decimal getDecimal(int rowId, int precision, int scale) {
    throw notBinary();
  }

  /** The bytes as a string (a copy, as {@link #getBinary}: the arrays are reused after the batch). */
  @Override
  public UTF8String getUTF8String(int rowId) {
    byte[] bytes = getBinary(rowId);
    return bytes == null ? null : UTF8String.fromBytes(bytes);
  }

  @Override
  public ColumnVector getChild(int ordinal) {
    throw notBinary();
  }
}

/* Walk the records of one RecordBatch v2 and check their framing, without decoding them.
 *
 * scan(records, count) -> None | (record_index, byte_position, reason)
 *
 * `records` is the (decompressed) record section of a batch that claims `count`
 * records. Each record is: varint length, then exactly `length` bytes holding
 * int8 attributes, varlong timestamp delta, varint offset delta, varint key
 * length (-1: null) and key, varint value length (-1: null) and value, varint
 * header count, and per header a varint key length (not null) and key, a varint
 * value length (-1: null) and value (Kafka's DefaultRecord). The walk checks what
 * Kafka's broker checks when it iterates a batch before appending it:
 *
 *   - every length and count is a well-formed varint and fits in what remains
 *     of the record (nothing is read past the buffer);
 *   - the record's fields end exactly where its length says;
 *   - the offset delta of record i is i (Strata stores batches as sent, so a
 *     batch with other deltas would give its records wrong offsets);
 *   - exactly `count` records, and no bytes after the last one.
 *
 * None means the batch is well formed; otherwise the first fault is described.
 * The GIL is released during the walk (it reads a buffer the caller holds).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* zig-zag varint of at most max_bytes bytes (5 for varint, 10 for varlong) */
static inline int varint(const unsigned char *p, Py_ssize_t end, Py_ssize_t *pos, int max_bytes, int64_t *out)
{
    if (*pos < end && p[*pos] < 0x80) { /* one byte: most lengths and deltas */
        uint64_t b = p[(*pos)++];
        *out = (int64_t)((b >> 1) ^ (~(b & 1) + 1));
        return 0;
    }
    uint64_t value = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes && *pos < end; i++) {
        unsigned char b = p[(*pos)++];
        value |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)((value >> 1) ^ (~(value & 1) + 1));
            return 0;
        }
        shift += 7;
    }
    return -1;
}

/* a length-prefixed field ending by `end`; -1 (null) allowed when nullable */
static int field(const unsigned char *p, Py_ssize_t end, Py_ssize_t *pos, int nullable)
{
    int64_t len;
    if (varint(p, end, pos, 5, &len) < 0)
        return -1;
    if (len == -1 && nullable)
        return 0;
    if (len < 0 || len > end - *pos)
        return -1;
    *pos += (Py_ssize_t)len;
    return 0;
}

/* 0 when well formed, else the reason; *index and *pos say where */
static const char *walk(const unsigned char *p, Py_ssize_t n, long long count, long long *index, Py_ssize_t *at)
{
    Py_ssize_t pos = 0;
    for (long long i = 0; i < count; i++) {
        int64_t length, ts_delta, off_delta, headers;
        *index = i;
        *at = pos;
        if (pos >= n)
            return "the batch ends before its declared record count";
        if (varint(p, n, &pos, 5, &length) < 0)
            return "malformed record length";
        if (length < 1 || length > n - pos)
            return "record length runs past the end of the batch";
        Py_ssize_t end = pos + (Py_ssize_t)length;
        pos += 1; /* attributes */
        if (varint(p, end, &pos, 10, &ts_delta) < 0)
            return "malformed timestamp delta";
        if (varint(p, end, &pos, 5, &off_delta) < 0)
            return "malformed offset delta";
        if (off_delta != i)
            return "offset delta differs from the record's position in the batch";
        if (field(p, end, &pos, 1) < 0)
            return "malformed key";
        if (field(p, end, &pos, 1) < 0)
            return "malformed value";
        if (varint(p, end, &pos, 5, &headers) < 0 || headers < 0 || headers > end - pos)
            return "malformed header count";
        for (int64_t h = 0; h < headers; h++) {
            if (field(p, end, &pos, 0) < 0 || field(p, end, &pos, 1) < 0)
                return "malformed record header";
        }
        if (pos != end)
            return "record fields do not end where its length says";
    }
    *index = count;
    *at = pos;
    if (pos != n)
        return "bytes remain after the declared record count";
    return NULL;
}

static PyObject *scan(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long count;
    if (!PyArg_ParseTuple(args, "y*L", &view, &count))
        return NULL;
    long long index = 0;
    Py_ssize_t at = 0;
    const char *reason;
    if (count < 0) {
        reason = "negative record count";
    } else if (view.len > 65536) {
        Py_BEGIN_ALLOW_THREADS
        reason = walk(view.buf, view.len, count, &index, &at);
        Py_END_ALLOW_THREADS
    } else {
        reason = walk(view.buf, view.len, count, &index, &at);
    }
    PyBuffer_Release(&view);
    if (reason == NULL)
        Py_RETURN_NONE;
    return Py_BuildValue("(Lns)", index, at, reason);
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "Check the framing of a RecordBatch v2 record section."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "common.record._recordscan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__recordscan(void) { return PyModule_Create(&module); }

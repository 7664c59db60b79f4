/* Column-wise decoding of Kafka RecordBatch v2 records for the Spark source.
 *
 * decode(records, count, base_offset, base_timestamp, max_timestamp, log_append, lo, hi)
 *
 * `records` is the (decompressed) record section of one batch: `count` records, each
 * varint length, attributes, varint timestamp delta, varint offset delta, key, value,
 * headers (Kafka's format; lengths are zig-zag varints, -1 is null). Records with
 * offsets in [lo, hi) come back as Arrow-ready buffers:
 *
 *   (n, offsets int64[n], timestamps_us int64[n], key_lengths int32[n] (-1 null),
 *    key_data, value_lengths int32[n], value_data)
 *
 * Headers are skipped (the Python path decodes them when includeHeaders is on).
 * A malformed record raises ValueError; nothing is read past the buffer.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static int varint(const unsigned char *p, Py_ssize_t n, Py_ssize_t *pos, int64_t *out)
{
    uint64_t value = 0;
    int shift = 0;
    while (*pos < n) {
        unsigned char b = p[(*pos)++];
        value |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)((value >> 1) ^ (~(value & 1) + 1));
            return 0;
        }
        shift += 7;
        if (shift > 63)
            return -1;
    }
    return -1;
}

/* a length-prefixed field: its length (-1 for null) and where its bytes start */
static int field(const unsigned char *p, Py_ssize_t end, Py_ssize_t *pos, int64_t *len, Py_ssize_t *at)
{
    if (varint(p, end, pos, len) < 0 || *len < -1 || *len > end - *pos)
        return -1;
    *at = *pos;
    if (*len > 0)
        *pos += *len;
    return 0;
}

static PyObject *decode(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long count, base_offset, base_ts, max_ts, lo, hi;
    int log_append;
    if (!PyArg_ParseTuple(args, "y*LLLLpLL", &view, &count, &base_offset, &base_ts, &max_ts,
                          &log_append, &lo, &hi))
        return NULL;
    const unsigned char *p = view.buf;
    Py_ssize_t n = view.len, pos = 0, rows = 0, kused = 0, vused = 0;
    PyObject *result = NULL;
    if (count < 0 || count > n) {
        PyErr_SetString(PyExc_ValueError, "record count does not fit the batch");
        PyBuffer_Release(&view);
        return NULL;
    }
    int64_t *offsets = PyMem_Malloc((count + 1) * sizeof(int64_t));
    int64_t *stamps = PyMem_Malloc((count + 1) * sizeof(int64_t));
    int32_t *klen = PyMem_Malloc((count + 1) * sizeof(int32_t));
    int32_t *vlen = PyMem_Malloc((count + 1) * sizeof(int32_t));
    char *kdata = PyMem_Malloc(n + 1);
    char *vdata = PyMem_Malloc(n + 1);
    if (!offsets || !stamps || !klen || !vlen || !kdata || !vdata) {
        PyErr_NoMemory();
        goto done;
    }
    for (long long i = 0; i < count; i++) {
        int64_t length, ts_delta, off_delta, key_len, value_len, headers, hlen;
        Py_ssize_t key_at, value_at, hat;
        if (varint(p, n, &pos, &length) < 0 || length < 0 || length > n - pos)
            goto malformed;
        Py_ssize_t end = pos + length;
        pos += 1; /* attributes */
        if (pos > end || varint(p, end, &pos, &ts_delta) < 0 || varint(p, end, &pos, &off_delta) < 0 ||
            field(p, end, &pos, &key_len, &key_at) < 0 || field(p, end, &pos, &value_len, &value_at) < 0 ||
            varint(p, end, &pos, &headers) < 0 || headers < 0)
            goto malformed;
        for (int64_t h = 0; h < headers; h++) {
            if (field(p, end, &pos, &hlen, &hat) < 0 || hlen < 0 || field(p, end, &pos, &hlen, &hat) < 0)
                goto malformed;
        }
        if (pos != end)
            goto malformed;
        int64_t offset = base_offset + off_delta;
        if (offset < lo)
            continue;
        if (offset >= hi)
            break;
        offsets[rows] = offset;
        stamps[rows] = (log_append ? max_ts : base_ts + ts_delta) * 1000;
        klen[rows] = (int32_t)key_len;
        vlen[rows] = (int32_t)value_len;
        if (key_len > 0) {
            memcpy(kdata + kused, p + key_at, key_len);
            kused += key_len;
        }
        if (value_len > 0) {
            memcpy(vdata + vused, p + value_at, value_len);
            vused += value_len;
        }
        rows++;
    }
    result = Py_BuildValue("ny#y#y#y#y#y#", rows,
                           (const char *)offsets, rows * (Py_ssize_t)sizeof(int64_t),
                           (const char *)stamps, rows * (Py_ssize_t)sizeof(int64_t),
                           (const char *)klen, rows * (Py_ssize_t)sizeof(int32_t),
                           kdata, kused,
                           (const char *)vlen, rows * (Py_ssize_t)sizeof(int32_t),
                           vdata, vused);
    goto done;
malformed:
    PyErr_Format(PyExc_ValueError, "malformed record at byte %zd of the batch's records", pos);
done:
    PyMem_Free(offsets);
    PyMem_Free(stamps);
    PyMem_Free(klen);
    PyMem_Free(vlen);
    PyMem_Free(kdata);
    PyMem_Free(vdata);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS, "Decode a RecordBatch v2 record section into column buffers."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "spark._decode", NULL, -1, methods};

PyMODINIT_FUNC PyInit__decode(void) { return PyModule_Create(&module); }

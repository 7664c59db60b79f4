/* The record loop of a TLS produce (service/security/tls_transport.py), in C.
 *
 * read_records hands ciphertext to OpenSSL a slice at a time and decrypts records
 * straight into a request buffer until the buffer is full, the ciphertext at hand is
 * used up, or OpenSSL reports an error. In Python this loop cost a call per record and
 * per slice (cffi, the GIL handed over each time), as much as the decryption itself for
 * the 16 KiB records of the Java client and more for librdkafka's small ones.
 *
 * It calls the OpenSSL of the `cryptography` wheel, the one the listeners' connections
 * live in, through the addresses of its functions that `bind` is given
 * (service/security/tls_engine.py takes them from cryptography's bindings): no OpenSSL
 * headers or library are needed to build this. The signatures below are OpenSSL's
 * public ones, unchanged since 1.1.0.
 *
 * Optional, as common/record/_recordscan.c: without a C compiler the loop runs in Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>

typedef int (*ssl_read_fn)(void *ssl, void *buf, int num);
typedef int (*ssl_get_error_fn)(const void *ssl, int ret);
typedef int (*bio_write_fn)(void *bio, const void *data, int dlen);
typedef void (*err_clear_error_fn)(void);

static ssl_read_fn ssl_read;
static ssl_get_error_fn ssl_get_error;
static bio_write_fn bio_write;
static err_clear_error_fn err_clear_error;

#define SSL_ERROR_WANT_READ 2 /* OpenSSL's value, part of its ABI */

static PyObject *
bind(PyObject *self, PyObject *args)
{
    unsigned long long read_at, get_error_at, write_at, clear_at;
    if (!PyArg_ParseTuple(args, "KKKK:bind", &read_at, &get_error_at, &write_at, &clear_at))
        return NULL;
    if (!read_at || !get_error_at || !write_at || !clear_at) {
        PyErr_SetString(PyExc_ValueError, "bind: a function address is NULL");
        return NULL;
    }
    ssl_read = (ssl_read_fn)(uintptr_t)read_at;
    ssl_get_error = (ssl_get_error_fn)(uintptr_t)get_error_at;
    bio_write = (bio_write_fn)(uintptr_t)write_at;
    err_clear_error = (err_clear_error_fn)(uintptr_t)clear_at;
    Py_RETURN_NONE;
}

/* read_records(ssl, rbio, source, start, end, slice, target, got) -> (got, start, error)
 *
 * ssl, rbio: the connection's SSL* and its incoming memory BIO, as integers.
 * source[start:end]: ciphertext not yet given to OpenSSL; it is given `slice` bytes at a
 * time, each only once OpenSSL wants more.
 * target[got:]: where plaintext goes.
 * Returns the bytes of target filled, where the ciphertext not yet given now starts, and
 * 0 (target full) or SSL_get_error's code for the read that stopped: WANT_READ when the
 * ciphertext at hand is used up. On another code OpenSSL's error queue holds why. */
static PyObject *
read_records(PyObject *self, PyObject *args)
{
    unsigned long long ssl_at, rbio_at;
    Py_buffer source, target;
    Py_ssize_t start, end, slice, got;
    if (ssl_read == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "read_records before bind");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "KKy*nnnw*n:read_records", &ssl_at, &rbio_at, &source, &start, &end,
                          &slice, &target, &got))
        return NULL;
    if (!ssl_at || !rbio_at || start < 0 || start > end || end > source.len || slice <= 0
        || slice > INT_MAX || got < 0 || got > target.len) {
        PyBuffer_Release(&source);
        PyBuffer_Release(&target);
        PyErr_SetString(PyExc_ValueError, "read_records: arguments out of range");
        return NULL;
    }
    void *ssl = (void *)(uintptr_t)ssl_at, *rbio = (void *)(uintptr_t)rbio_at;
    char *in = (char *)source.buf, *out = (char *)target.buf;
    Py_ssize_t size = target.len;
    int error = 0;

    Py_BEGIN_ALLOW_THREADS
    for (;;) {
        int n = 0;
        err_clear_error(); /* the thread's queue: only this read's errors may be in it */
        while (got < size) {
            Py_ssize_t want = size - got;
            n = ssl_read(ssl, out + got, want > INT_MAX ? INT_MAX : (int)want);
            if (n <= 0)
                break;
            got += n;
        }
        if (got == size) {
            error = 0;
            break;
        }
        error = ssl_get_error(ssl, n);
        if (error != SSL_ERROR_WANT_READ || start == end)
            break;
        Py_ssize_t give = end - start < slice ? end - start : slice;
        if (bio_write(rbio, in + start, (int)give) != (int)give) {
            error = -1; /* a memory BIO takes everything, or is out of memory */
            break;
        }
        start += give;
    }
    Py_END_ALLOW_THREADS

    PyBuffer_Release(&source);
    PyBuffer_Release(&target);
    return Py_BuildValue("nni", got, start, error);
}

static PyMethodDef methods[] = {
    {"bind", bind, METH_VARARGS, "bind(SSL_read, SSL_get_error, BIO_write, ERR_clear_error): their addresses"},
    {"read_records", read_records, METH_VARARGS,
     "read_records(ssl, rbio, source, start, end, slice, target, got) -> (got, start, error)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tlsread", NULL, -1, methods};

PyMODINIT_FUNC
PyInit__tlsread(void)
{
    return PyModule_Create(&module);
}

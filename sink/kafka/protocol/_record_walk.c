/*
 * sink.kafka.protocol._record_walk: record_check._walk (the decode of every record of a
 * RecordBatch v2 at ingest) in C.
 *
 * Why this exists: the walk runs for every record of every Produce request; in Python it
 * costs about 1.2 us a record here (two varint calls and a dozen byte reads), a third of the
 * cluster's whole CPU per 100 B record at kcat's rates. Here a record costs a few ns.
 *
 * Division of work with record_check.py: this module only answers "do these records decode,
 * and where does the last one end?". walk(buf, start, end, count) returns the position after
 * the count-th record, exactly what _walk returns, or -1 where _walk would raise; the caller
 * then runs _walk itself, which raises the error with its message. So every error a client sees
 * comes from the Python code, and this module needs to agree with it only on success, which
 * tests/unit/sink/test_record_walk_native.py checks on random and mutated batches.
 *
 * Invariants:
 * - Every read is bounds-checked: against `end` (the batch's end) for the record-length varint
 *   and against the record's own end for its fields. A read that would pass the record's end
 *   means _walk fails too (its position only grows, and it must land exactly on the record's
 *   end), so stopping there is equivalent.
 * - A varint of more than 64 bits (Python reads it as a larger int) decodes to VARINT_HUGE,
 *   which every check below rejects as _walk rejects the larger value; a timestamp delta, which
 *   _walk accepts whatever its value, accepts it too.
 * - Nothing is allocated, nothing is kept; the GIL is held throughout (a 1 MiB batch of 1 KiB
 *   records takes a few microseconds).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define VARINT_HUGE INT64_MAX

/* A zigzag varint of at most 10 bytes at b[*p], every byte before `limit`. 0 on success
 * (*out, *p advanced), -1 when it runs past limit or is longer than 10 bytes (_varint's
 * BatchError and IndexError alike). */
static int read_varint(const uint8_t *b, Py_ssize_t limit, Py_ssize_t *p, int64_t *out) {
    Py_ssize_t q = *p;
    uint64_t z = 0;
    int shift = 0, over = 0;
    for (;;) {
        if (q >= limit) return -1;
        uint8_t byte = b[q++];
        uint64_t bits = byte & 0x7F;
        if (shift == 63 && bits > 1) over = 1; /* bits past the 64th */
        if (shift < 64) z |= bits << shift;
        if (byte < 0x80) break;
        shift += 7;
        if (shift > 63) return -1;
    }
    *p = q;
    if (over) {
        *out = VARINT_HUGE;
    } else {
        *out = (int64_t)((z >> 1) ^ (~(z & 1) + 1));
    }
    return 0;
}

/* _skip_bytes: a length-prefixed field inside the record ending at rend. */
static int skip_bytes(const uint8_t *b, Py_ssize_t rend, Py_ssize_t *p, int nullable) {
    int64_t size;
    if (read_varint(b, rend, p, &size)) return -1;
    if (size < 0) return (size == -1 && nullable) ? 0 : -1;
    if (size > rend - *p) return -1;
    *p += (Py_ssize_t)size;
    return 0;
}

static Py_ssize_t walk_records(const uint8_t *b, Py_ssize_t p, Py_ssize_t n, long long count) {
    for (long long i = 0; i < count; i++) {
        int64_t length, value;
        if (read_varint(b, n, &p, &length)) return -1;
        if (length < 6 || length > n - p) return -1;
        Py_ssize_t rend = p + (Py_ssize_t)length;
        p += 1; /* attributes */
        if (p >= rend) return -1;
        if (read_varint(b, rend, &p, &value)) return -1; /* timestampDelta: any value */
        if (read_varint(b, rend, &p, &value)) return -1; /* offsetDelta: must be i */
        if (value != i) return -1;
        if (skip_bytes(b, rend, &p, 1)) return -1; /* key */
        if (skip_bytes(b, rend, &p, 1)) return -1; /* value */
        int64_t headers;
        if (read_varint(b, rend, &p, &headers)) return -1;
        if (headers < 0 || headers > rend - p) return -1;
        for (int64_t h = 0; h < headers; h++) {
            if (skip_bytes(b, rend, &p, 0)) return -1;
            if (skip_bytes(b, rend, &p, 1)) return -1;
        }
        if (p != rend) return -1;
    }
    return p;
}

static PyObject *walk(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view;
    Py_ssize_t start, end;
    long long count;
    if (!PyArg_ParseTuple(args, "y*nnL:walk", &view, &start, &end, &count)) return NULL;
    Py_ssize_t result = -1;
    if (start >= 0 && start <= end && end <= view.len) {
        result = walk_records((const uint8_t *)view.buf, start, end, count);
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(result);
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS,
     "walk(buffer, start, end, count) -> the position after the count-th record of "
     "buffer[start:end], or -1 where record_check._walk would raise."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_record_walk",
    "record_check._walk in C (see the comment at the top of _record_walk.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__record_walk(void) { return PyModule_Create(&module); }

/*
 * connectors.spark._v2records: the records section of Kafka RecordBatch v2 -> Arrow buffers.
 *
 * Why this exists: decoding through per-record Python objects (aiokafka's Cython records, then
 * key/value/timestamp maps, then pa.array) costs ~250 ns a record in the Spark worker, most of
 * the source's overhead over an in-memory Arrow source. Here a record costs a few varint reads
 * and two memcpys; no Python object is made per record.
 *
 * Division of work with connectors/spark/decode.py: Python parses the 61-byte batch header,
 * skips control batches and decompresses; this module parses the (uncompressed) records and
 * appends those with base_offset + offsetDelta in [lo, hi) to growing column buffers laid out
 * exactly as Arrow wants them (int32 offsets + data + LSB-first validity bitmap for binary and
 * string columns, int64 for offsets and timestamps). take() hands them over as bytes objects,
 * which pyarrow wraps without a copy.
 *
 * Invariants:
 * - Every read is bounds-checked against the end of the record it belongs to; malformed input
 *   raises ValueError, never reads outside the buffer, and leaves the accumulator unchanged
 *   (a failed add() rolls back everything it appended), so a caller may retry elsewhere.
 * - Kept offsets are strictly increasing across all add() calls since the last take().
 * - Binary offsets are int32 (Arrow `binary`); a column whose data would pass 2^31-1 bytes
 *   raises OverflowError instead of wrapping. Callers flush well before (CHUNK_BYTES).
 * - The GIL is released while parsing large sections; the object itself is not thread-safe
 *   (one RangeDecoder, one thread), which is how decode.py uses it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Sections at least this large are parsed without the GIL (smaller ones are not worth the
 * release/re-acquire). */
#define RELEASE_GIL_BYTES (64 * 1024)

typedef struct {
    char *p;
    size_t len, cap;
} Buf;

static int buf_reserve(Buf *b, size_t extra) {
    if (b->len + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + extra) {
        if (cap > SIZE_MAX / 2) return -1;
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (p == NULL) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const void *src, size_t n) {
    if (buf_reserve(b, n)) return -1;
    memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

static void buf_free(Buf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* An Arrow binary/string column under construction: offsets (int32, one more than rows),
 * data, validity bitmap (bit i set = row i not null). */
typedef struct {
    Buf offsets, data, validity;
    int64_t rows, nulls;
} BinCol;

static void bincol_free(BinCol *c) {
    buf_free(&c->offsets);
    buf_free(&c->data);
    buf_free(&c->validity);
}

/* Cuts a validity bitmap back to `rows` bits: its length follows from the row count, and bits
 * of dropped rows in the last byte are cleared (bit_append only ever sets bits). */
static void bits_truncate(Buf *bits, int64_t rows) {
    bits->len = (size_t)((rows + 7) >> 3);
    if (rows & 7) bits->p[bits->len - 1] &= (char)((1u << (rows & 7)) - 1u);
}

/* What a column needs to be rolled back (a failed add() must leave no partial record behind);
 * the offsets' and validity's lengths follow from the row count. */
typedef struct {
    size_t data;
    int64_t rows, nulls;
} BinMark;

static BinMark bincol_mark(const BinCol *c) {
    BinMark m = {c->data.len, c->rows, c->nulls};
    return m;
}

static void bincol_rollback(BinCol *c, BinMark m) {
    c->data.len = m.data;
    c->rows = m.rows;
    c->nulls = m.nulls;
    c->offsets.len = (size_t)(m.rows + 1) * sizeof(int32_t);
    bits_truncate(&c->validity, m.rows);
}

enum { OK = 0, E_NOMEM = 1, E_CORRUPT = 2, E_OVERFLOW = 3, E_ORDER = 4 };

static int bit_append(Buf *bits, int64_t index, int set) {
    if ((index & 7) == 0) {
        char zero = 0;
        if (buf_put(bits, &zero, 1)) return E_NOMEM;
    }
    if (set) bits->p[index >> 3] |= (char)(1u << (index & 7));
    return OK;
}

/* len < 0 appends a null. */
static int bincol_append(BinCol *c, const uint8_t *src, int64_t len) {
    int rc = bit_append(&c->validity, c->rows, len >= 0);
    if (rc) return rc;
    if (len > 0) {
        if ((int64_t)c->data.len + len > INT32_MAX) return E_OVERFLOW;
        if (buf_put(&c->data, src, (size_t)len)) return E_NOMEM;
    }
    if (len < 0) c->nulls++;
    int32_t end = (int32_t)c->data.len;
    if (buf_put(&c->offsets, &end, sizeof end)) return E_NOMEM;
    c->rows++;
    return OK;
}

/* Kafka's zigzag varint (up to 10 bytes). NULL on overrun or overlong encoding. */
static inline const uint8_t *read_varlong(const uint8_t *p, const uint8_t *end, int64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70 && p < end; shift += 7) {
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
            return p;
        }
    }
    return NULL;
}

typedef struct {
    PyObject_HEAD
    int include_headers;
    int64_t rows;
    int64_t last_offset; /* last kept offset since take(); INT64_MIN when none */
    Buf offsets;         /* int64 */
    Buf timestamps;      /* int64, microseconds since the epoch */
    BinCol keys, values;
    Buf hlist_offsets;   /* int32, rows + 1 entries */
    Buf hlist_validity;  /* a record without headers is a null list (as Spark's Kafka source) */
    int64_t hlist_nulls;
    BinCol hkeys, hvalues;
} Accumulator;

static void acc_free_buffers(Accumulator *a) {
    buf_free(&a->offsets);
    buf_free(&a->timestamps);
    bincol_free(&a->keys);
    bincol_free(&a->values);
    buf_free(&a->hlist_offsets);
    buf_free(&a->hlist_validity);
    bincol_free(&a->hkeys);
    bincol_free(&a->hvalues);
}

/* Empties the columns but keeps their memory: the next chunk is about as large as this one,
 * so it fills without regrowing. */
static int acc_reset(Accumulator *a) {
    int32_t zero = 0;
    Buf *all[] = {&a->offsets, &a->timestamps, &a->keys.offsets, &a->keys.data,
                  &a->keys.validity, &a->values.offsets, &a->values.data, &a->values.validity,
                  &a->hlist_offsets, &a->hlist_validity, &a->hkeys.offsets, &a->hkeys.data,
                  &a->hkeys.validity, &a->hvalues.offsets, &a->hvalues.data,
                  &a->hvalues.validity};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) all[i]->len = 0;
    a->keys.rows = a->keys.nulls = a->values.rows = a->values.nulls = 0;
    a->hkeys.rows = a->hkeys.nulls = a->hvalues.rows = a->hvalues.nulls = 0;
    a->rows = 0;
    a->last_offset = INT64_MIN;
    a->hlist_nulls = 0;
    BinCol *cols[] = {&a->keys, &a->values, &a->hkeys, &a->hvalues};
    for (size_t i = 0; i < 4; i++) {
        if (buf_put(&cols[i]->offsets, &zero, sizeof zero)) return -1;
    }
    return buf_put(&a->hlist_offsets, &zero, sizeof zero);
}

typedef struct {
    const uint8_t *data;
    size_t len;
    int64_t count, base_offset, first_ts, max_ts, lo, hi;
    int log_append;
    /* results */
    int64_t kept;
    size_t error_at; /* byte position of a parse error */
    int64_t error_record;
} AddArgs;

/* Parses the records and appends the kept ones. Runs without the GIL: no Python API here. */
static int acc_parse(Accumulator *a, AddArgs *x) {
    const uint8_t *p = x->data, *end = x->data + x->len;
    int rc = OK;
    for (int64_t i = 0; i < x->count; i++) {
        x->error_record = i;
        int64_t length, ts_delta, offset_delta, klen, vlen, hcount;
        const uint8_t *rec_start = p;
        if (!(p = read_varlong(p, end, &length)) || length < 0 || length > end - p) goto corrupt;
        const uint8_t *rec_end = p + length;
        if (p >= rec_end) goto corrupt; /* attributes: int8, unused in v2 records */
        p++;
        if (!(p = read_varlong(p, rec_end, &ts_delta))) goto corrupt;
        if (!(p = read_varlong(p, rec_end, &offset_delta))) goto corrupt;
        if (offset_delta < 0 || offset_delta > INT32_MAX) goto corrupt;
        if (!(p = read_varlong(p, rec_end, &klen)) || klen < -1 || klen > rec_end - p) goto corrupt;
        const uint8_t *key = p;
        if (klen > 0) p += klen;
        if (!(p = read_varlong(p, rec_end, &vlen)) || vlen < -1 || vlen > rec_end - p) goto corrupt;
        const uint8_t *value = p;
        if (vlen > 0) p += vlen;
        if (!(p = read_varlong(p, rec_end, &hcount)) || hcount < 0 || hcount > rec_end - p) goto corrupt;

        int64_t offset = x->base_offset + offset_delta;
        int keep = offset >= x->lo && offset < x->hi;
        if (keep && offset <= a->last_offset) {
            x->error_at = (size_t)(rec_start - x->data);
            return E_ORDER;
        }
        int with_headers = keep && a->include_headers;
        for (int64_t h = 0; h < hcount; h++) {
            int64_t hklen, hvlen;
            if (!(p = read_varlong(p, rec_end, &hklen)) || hklen < 0 || hklen > rec_end - p) goto corrupt;
            const uint8_t *hkey = p;
            p += hklen;
            if (!(p = read_varlong(p, rec_end, &hvlen)) || hvlen < -1 || hvlen > rec_end - p) goto corrupt;
            const uint8_t *hval = p;
            if (hvlen > 0) p += hvlen;
            if (with_headers) {
                if ((rc = bincol_append(&a->hkeys, hkey, hklen))) return rc;
                if ((rc = bincol_append(&a->hvalues, hval, hvlen))) return rc;
            }
        }
        if (p != rec_end) goto corrupt; /* the record's length must match its fields */
        if (!keep) continue;

        /* The timestamp is in ms; Arrow's column is us. Unsigned multiply: wraps like numpy
         * instead of undefined behaviour on absurd values. */
        int64_t ts_ms = x->log_append ? x->max_ts : (int64_t)((uint64_t)x->first_ts + (uint64_t)ts_delta);
        int64_t ts_us = (int64_t)((uint64_t)ts_ms * 1000u);
        if (buf_put(&a->offsets, &offset, sizeof offset)) return E_NOMEM;
        if (buf_put(&a->timestamps, &ts_us, sizeof ts_us)) return E_NOMEM;
        if ((rc = bincol_append(&a->keys, key, klen))) return rc;
        if ((rc = bincol_append(&a->values, value, vlen))) return rc;
        if (a->include_headers) {
            if ((rc = bit_append(&a->hlist_validity, a->rows, hcount > 0))) return rc;
            if (hcount == 0) a->hlist_nulls++;
            int32_t hend = (int32_t)a->hkeys.rows;
            if (a->hkeys.rows > INT32_MAX) return E_OVERFLOW;
            if (buf_put(&a->hlist_offsets, &hend, sizeof hend)) return E_NOMEM;
        }
        a->last_offset = offset;
        a->rows++;
        x->kept++;
    }
    if (p != end) {
        x->error_record = x->count;
        x->error_at = (size_t)(p - x->data);
        return E_CORRUPT; /* bytes left after the batch's record count */
    }
    return OK;
corrupt:
    x->error_at = (size_t)((p ? p : end) - x->data);
    return E_CORRUPT;
}

static PyObject *Accumulator_add(Accumulator *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"records", "count", "base_offset", "first_timestamp",
                             "max_timestamp", "log_append_time", "lo", "hi", NULL};
    Py_buffer view;
    AddArgs x;
    memset(&x, 0, sizeof x);
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*LLLLpLL", kwlist, &view, &x.count,
                                     &x.base_offset, &x.first_ts, &x.max_ts, &x.log_append,
                                     &x.lo, &x.hi)) {
        return NULL;
    }
    if (x.count < 0) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "corrupt record batch: negative record count %lld",
                     (long long)x.count);
        return NULL;
    }
    x.data = view.buf;
    x.len = (size_t)view.len;

    /* Marks to roll back to on error; every per-row buffer's length follows from the rows. */
    int64_t m_rows = self->rows, m_last = self->last_offset, m_hnulls = self->hlist_nulls;
    BinMark mk = bincol_mark(&self->keys), mv = bincol_mark(&self->values);
    BinMark mhk = bincol_mark(&self->hkeys), mhv = bincol_mark(&self->hvalues);

    int rc;
    if (x.len >= RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        rc = acc_parse(self, &x);
        Py_END_ALLOW_THREADS
    } else {
        rc = acc_parse(self, &x);
    }
    PyBuffer_Release(&view);
    if (rc == OK) return PyLong_FromLongLong(x.kept);

    self->rows = m_rows;
    self->last_offset = m_last;
    self->offsets.len = self->timestamps.len = (size_t)m_rows * sizeof(int64_t);
    if (self->include_headers) {
        self->hlist_nulls = m_hnulls;
        self->hlist_offsets.len = (size_t)(m_rows + 1) * sizeof(int32_t);
        bits_truncate(&self->hlist_validity, m_rows);
    }
    bincol_rollback(&self->keys, mk);
    bincol_rollback(&self->values, mv);
    bincol_rollback(&self->hkeys, mhk);
    bincol_rollback(&self->hvalues, mhv);
    switch (rc) {
    case E_NOMEM:
        return PyErr_NoMemory();
    case E_OVERFLOW:
        PyErr_SetString(PyExc_OverflowError,
                        "more than 2^31-1 bytes in one column: take() more often");
        return NULL;
    case E_ORDER:
        PyErr_Format(PyExc_ValueError,
                     "offsets not increasing: a record at byte %zu of the records section"
                     " (base offset %lld) repeats or precedes offset %lld",
                     x.error_at, (long long)x.base_offset, (long long)m_last);
        return NULL;
    default:
        PyErr_Format(PyExc_ValueError,
                     "corrupt record batch (base offset %lld): record %lld of %lld is malformed"
                     " at byte %zu of %zu in the records section",
                     (long long)x.base_offset, (long long)x.error_record, (long long)x.count,
                     x.error_at, x.len);
        return NULL;
    }
}

static PyObject *bytes_of(const Buf *b) {
    return PyBytes_FromStringAndSize(b->p ? b->p : "", (Py_ssize_t)b->len);
}

/* (validity or None, offsets, data, null_count) */
static PyObject *bincol_take(const BinCol *c) {
    PyObject *valid;
    if (c->nulls) {
        valid = bytes_of(&c->validity);
        if (valid == NULL) return NULL;
    } else {
        valid = Py_NewRef(Py_None);
    }
    PyObject *offs = bytes_of(&c->offsets), *data = bytes_of(&c->data);
    if (offs == NULL || data == NULL) {
        Py_DECREF(valid);
        Py_XDECREF(offs);
        Py_XDECREF(data);
        return NULL;
    }
    return Py_BuildValue("(NNNL)", valid, offs, data, (long long)c->nulls);
}

static PyObject *Accumulator_take(Accumulator *self, PyObject *Py_UNUSED(ignored)) {
    PyObject *headers = Py_NewRef(Py_None);
    if (self->include_headers) {
        Py_DECREF(headers);
        PyObject *lvalid;
        if (self->hlist_nulls) {
            lvalid = bytes_of(&self->hlist_validity);
        } else {
            lvalid = Py_NewRef(Py_None);
        }
        headers = Py_BuildValue("(NNLNNL)", lvalid, bytes_of(&self->hlist_offsets),
                                (long long)self->hlist_nulls, bincol_take(&self->hkeys),
                                bincol_take(&self->hvalues), (long long)self->hkeys.rows);
        if (headers == NULL) return NULL;
    }
    PyObject *out = Py_BuildValue("(LNNNNN)", (long long)self->rows, bytes_of(&self->offsets),
                                  bytes_of(&self->timestamps), bincol_take(&self->keys),
                                  bincol_take(&self->values), headers);
    if (out == NULL) return NULL;
    if (acc_reset(self)) {
        Py_DECREF(out);
        return PyErr_NoMemory();
    }
    return out;
}

static PyObject *Accumulator_get_rows(Accumulator *self, void *Py_UNUSED(closure)) {
    return PyLong_FromLongLong(self->rows);
}

static PyObject *Accumulator_get_nbytes(Accumulator *self, void *Py_UNUSED(closure)) {
    return PyLong_FromSize_t(self->keys.data.len + self->values.data.len +
                             self->hkeys.data.len + self->hvalues.data.len);
}

static int Accumulator_init(Accumulator *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"include_headers", NULL};
    int include_headers = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p", kwlist, &include_headers)) return -1;
    self->include_headers = include_headers;
    if (acc_reset(self)) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void Accumulator_dealloc(Accumulator *self) {
    acc_free_buffers(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Accumulator_methods[] = {
    {"add", (PyCFunction)(void (*)(void))Accumulator_add, METH_VARARGS | METH_KEYWORDS,
     "add(records, count, base_offset, first_timestamp, max_timestamp, log_append_time, lo, hi)"
     " -> records kept\n\nParse the uncompressed records section of one RecordBatch v2 and keep"
     " the records whose offset is in [lo, hi). Raises ValueError on malformed input (nothing"
     " is kept then)."},
    {"take", (PyCFunction)Accumulator_take, METH_NOARGS,
     "take() -> (rows, offsets, timestamps_us, keys, values, headers)\n\nHand over the kept"
     " records as Arrow buffers and start empty. keys/values: (validity|None, int32 offsets,"
     " data, null_count); headers (None unless include_headers): (list validity|None, int32"
     " list offsets, list null_count, header keys, header values, header count)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Accumulator_getset[] = {
    {"rows", (getter)Accumulator_get_rows, NULL, "records kept since the last take()", NULL},
    {"nbytes", (getter)Accumulator_get_nbytes, NULL,
     "key, value and header bytes kept since the last take()", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject AccumulatorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "connectors.spark._v2records.Accumulator",
    .tp_doc = PyDoc_STR("Kept records of RecordBatch v2 sections, as Arrow column buffers."),
    .tp_basicsize = sizeof(Accumulator),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Accumulator_init,
    .tp_dealloc = (destructor)Accumulator_dealloc,
    .tp_methods = Accumulator_methods,
    .tp_getset = Accumulator_getset,
};

static struct PyModuleDef v2records_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "connectors.spark._v2records",
    .m_doc = PyDoc_STR("Kafka RecordBatch v2 records section -> Arrow column buffers."),
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__v2records(void) {
    if (PyType_Ready(&AccumulatorType) < 0) return NULL;
    PyObject *m = PyModule_Create(&v2records_module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Accumulator", (PyObject *)&AccumulatorType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

/* Captured-records lines straight into the Arrow buffers of files.RECORD_ARROW: the fast twin of
 * records_to_arrow(parse_captured_lines(lines)). It reads only the lines it is certain to read exactly as
 * msgspec does and returns None for anything else (an escape, an unknown or duplicate member, a number out of
 * its column's range...), so that the Python path, which says what is wrong with a line, stays the reference. */

#include "common.h"
#if defined(__x86_64__) && defined(__GNUC__)
#include <tmmintrin.h> /* SSSE3, used only where the CPU has it (init_b64) */
#define B64_SIMD
#endif

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the base64 decoder stores little-endian words (setup.py's optional build then leaves Python to read)"
#endif

/* A variable-length column (binary or string): int32 offsets, data and, when nullable, a validity bitmap. */
typedef struct {
    Buf offsets, data, valid;
    Py_ssize_t nulls;
    int nullable;
} Column;

static int column_init(Column *c, Py_ssize_t rows, Py_ssize_t data_cap, int nullable) {
    int32_t zero = 0;
    if (grow(&c->offsets, 4 * (rows + 1)) < 0 || put(&c->offsets, &zero, 4) < 0 || grow(&c->data, data_cap) < 0)
        return -1;
    c->nullable = nullable;
    return nullable ? grow(&c->valid, (rows + 7) / 8) : 0;
}

static void column_free(Column *c) {
    buf_free(&c->offsets);
    buf_free(&c->data);
    buf_free(&c->valid);
}

/* Ends the column's current row (null or not); fails when the data outgrows int32 offsets. */
static int column_end_row(Column *c, int null) {
    Py_ssize_t row = c->offsets.n / 4 - 1;
    int32_t end = (int32_t)c->data.n;
    if (c->data.n > INT32_MAX || put(&c->offsets, (const char *)&end, 4) < 0) return -1;
    c->nulls += null;
    return c->nullable ? set_bit(&c->valid, row, !null) : 0;
}

/* (validity or None, offsets, data, null count) */
static PyObject *column_finish(Column *c) {
    PyObject *valid = c->nulls ? buf_finish(&c->valid) : Py_NewRef(Py_None);
    PyObject *offsets = buf_finish(&c->offsets), *data = buf_finish(&c->data);
    if (!valid || !offsets || !data) {
        Py_XDECREF(valid);
        Py_XDECREF(offsets);
        Py_XDECREF(data);
        return NULL;
    }
    return Py_BuildValue("(NNNn)", valid, offsets, data, c->nulls);
}

enum { KEY, VALUE, TOPIC, PARTITION, OFFSET, TIMESTAMP, HEADERS, MEMBERS };
static const char *const MEMBER_NAMES[MEMBERS] = {"key", "value", "topic", "partition", "offset", "timestamp",
                                                  "headers"};
#define REQUIRED ((1 << TOPIC) | (1 << PARTITION) | (1 << OFFSET) | (1 << VALUE))

typedef struct {
    Column key, value, topic, header_names, header_values;
    Buf partition, offset, timestamp, timestamp_valid, header_offsets;
    Py_ssize_t rows, timestamp_nulls;
} Batch;

typedef struct {
    const unsigned char *p, *end;
} Cursor;

/* JSON's whitespace only: msgspec rejects the other bytes str.strip() removes. */
static void skip_ws(Cursor *c) {
    c->p = (const unsigned char *)ws((const char *)c->p, (const char *)c->end);
}

static int expect(Cursor *c, char ch) {
    skip_ws(c);
    if (c->p >= c->end || *c->p != (unsigned char)ch) return -1;
    c->p++;
    return 0;
}

/* Whether a ',' follows (taken). */
static int take_comma(Cursor *c) {
    skip_ws(c);
    if (c->p >= c->end || *c->p != ',') return 0;
    c->p++;
    return 1;
}

static int take_null(Cursor *c) {
    skip_ws(c);
    if (c->end - c->p >= 4 && memcmp(c->p, "null", 4) == 0) {
        c->p += 4;
        return 1;
    }
    return 0;
}

/* The raw text of a string without escapes or control characters (both left to msgspec). */
static int take_plain_string(Cursor *c, const unsigned char **start, Py_ssize_t *len) {
    if (expect(c, '"') < 0) return -1;
    const unsigned char *s = c->p;
    while (c->p < c->end && *c->p != '"') {
        if (*c->p == '\\' || *c->p < 0x20) return -1;
        c->p++;
    }
    if (c->p >= c->end) return -1;
    *start = s;
    *len = c->p - s;
    c->p++;
    return 0;
}

static int take_text(Cursor *c, Column *col) {
    const unsigned char *s;
    Py_ssize_t n;
    if (take_plain_string(c, &s, &n) < 0 || !utf8_valid(s, n)) return -1;
    return put(&col->data, (const char *)s, n);
}

/* Each character's 6 bits already in place for its position in a group of 4, little-endian, so that a group is
 * four lookups and ORs; a character outside the alphabet sets a bit no valid group has. */
#define B64_BAD 0x01000000u
static uint32_t B64[4][256];

#ifdef B64_SIMD
/* For sixteen characters at a time, by SSSE3's byte shuffle used as a 16-entry table: a character is outside
 * the alphabet when the class bits of its high nibble (B64_HIGH) meet those its low nibble rules out (B64_LOW);
 * its 6 bits are itself plus B64_ROLL's entry for its high nibble ('/' apart, at 1). init_b64 makes the three
 * from the alphabet and enables them where the CPU has SSSE3. */
static unsigned char B64_HIGH[16], B64_LOW[16];
static signed char B64_ROLL[16];
static int b64_simd;
#endif

static void init_b64(void) {
    const char *alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int c = 0; c < 256; c++)
        for (int pos = 0; pos < 4; pos++) B64[pos][c] = B64_BAD;
    for (uint32_t i = 0; i < 64; i++) {
        unsigned char c = (unsigned char)alphabet[i];
        B64[0][c] = i << 2;
        B64[1][c] = (i >> 4) | (i & 0x0F) << 12;
        B64[2][c] = (i >> 2) << 8 | (i & 0x03) << 22;
        B64[3][c] = i << 16;
    }
#ifdef B64_SIMD
    /* The character classes by high nibble: each distinct set of low nibbles that the alphabet holds under a
     * high nibble gets a bit. */
    uint16_t accepts[16] = {0}, sets[8];
    int n_sets = 0;
    for (int i = 0; i < 64; i++) accepts[(unsigned char)alphabet[i] >> 4] |= (uint16_t)(1u << (alphabet[i] & 15));
    for (int high = 0; high < 16; high++) {
        int j = 0;
        while (j < n_sets && sets[j] != accepts[high]) j++;
        if (j == n_sets) {
            if (n_sets == 8) return;
            sets[n_sets++] = accepts[high];
        }
        B64_HIGH[high] = (unsigned char)(1u << j);
    }
    for (int low = 0; low < 16; low++)
        for (int j = 0; j < n_sets; j++)
            if (!(sets[j] >> low & 1)) B64_LOW[low] |= (unsigned char)(1u << j);
    int taken[16] = {0};
    for (int i = 0; i < 64; i++) {
        int c = (unsigned char)alphabet[i], at = ((c >> 4) + (c == '/' ? 255 : 0)) & 0xFF;
        if (at > 15 || (taken[at] && B64_ROLL[at] != i - c)) return; /* one addend per entry, or no SIMD */
        B64_ROLL[at] = (signed char)(i - c);
        taken[at] = 1;
    }
    b64_simd = __builtin_cpu_supports("ssse3");
#endif
}

#ifdef B64_SIMD
/* Sixteen characters into twelve bytes while all sixteen are in the alphabet; returns where it stopped, which
 * the scalar loop takes from (and fails at, if a character there is not in the alphabet). */
__attribute__((target("ssse3"))) static const unsigned char *b64_blocks(const unsigned char *s,
                                                                        const unsigned char *end, unsigned char **out) {
    const __m128i high_classes = _mm_loadu_si128((const __m128i *)B64_HIGH);
    const __m128i low_classes = _mm_loadu_si128((const __m128i *)B64_LOW);
    const __m128i rolls = _mm_loadu_si128((const __m128i *)B64_ROLL);
    const __m128i nibble = _mm_set1_epi8(0x0F), slash = _mm_set1_epi8('/');
    const __m128i pairs = _mm_set1_epi32(0x01400140), quads = _mm_set1_epi32(0x00011000); /* a*64+b, x*4096+y */
    const __m128i order = _mm_setr_epi8(2, 1, 0, 6, 5, 4, 10, 9, 8, 14, 13, 12, -1, -1, -1, -1);
    unsigned char *o = *out;
    for (; end - s >= 16; s += 16, o += 12) {
        __m128i v = _mm_loadu_si128((const __m128i *)s);
        __m128i high = _mm_and_si128(_mm_srli_epi32(v, 4), nibble);
        __m128i outside = _mm_and_si128(_mm_shuffle_epi8(high_classes, high),
                                        _mm_shuffle_epi8(low_classes, _mm_and_si128(v, nibble)));
        if (_mm_movemask_epi8(_mm_cmpeq_epi8(outside, _mm_setzero_si128())) != 0xFFFF) break;
        __m128i sixes = _mm_add_epi8(v, _mm_shuffle_epi8(rolls, _mm_add_epi8(high, _mm_cmpeq_epi8(v, slash))));
        __m128i words = _mm_madd_epi16(_mm_maddubs_epi16(sixes, pairs), quads);
        _mm_storeu_si128((__m128i *)o, _mm_shuffle_epi8(words, order));
    }
    *out = o;
    return s;
}
#endif

/* Standard base64 as msgspec reads it: a multiple of 4 characters, at most two '=' and only at the end; the
 * unused bits of a padded group may be anything. Decoded straight into the column's data. */
static int take_base64(Cursor *c, Column *col) {
    if (expect(c, '"') < 0) return -1;
    /* Escapes and control characters are outside the alphabet: no need to look for them first. */
    const unsigned char *s = c->p, *close = memchr(s, '"', c->end - s);
    if (!close) return -1;
    Py_ssize_t n = close - s;
    c->p = close + 1;
    if (n % 4) return -1;
    int pad = n && s[n - 1] == '=' ? (s[n - 2] == '=' ? 2 : 1) : 0;
    Py_ssize_t size = n / 4 * 3 - pad;
    /* Each group is stored as 4 bytes, the 4th (and padding's) overwritten by what comes next. */
    if (grow(&col->data, n / 4 * 3 + 16) < 0) return -1; /* a block's store writes 16 */
    unsigned char *out = (unsigned char *)col->data.p + col->data.n;
    const unsigned char *last = pad ? close - 4 : close;
#ifdef B64_SIMD
    if (b64_simd) s = b64_blocks(s, last, &out);
#endif
    for (; s < last; s += 4, out += 3) {
        uint32_t v = B64[0][s[0]] | B64[1][s[1]] | B64[2][s[2]] | B64[3][s[3]];
        if (v & B64_BAD) return -1;
        memcpy(out, &v, 4);
    }
    if (pad) {
        uint32_t v = B64[0][s[0]] | B64[1][s[1]] | (pad == 1 ? B64[2][s[2]] : 0);
        if (v & B64_BAD) return -1;
        memcpy(out, &v, 4);
    }
    col->data.n += size;
    return 0;
}

/* A JSON integer within [low, high]; the byte after it is left for the caller, so "1.0" or "01" fail there. */
static int take_int(Cursor *c, int64_t low, int64_t high, int64_t *value) {
    skip_ws(c);
    int negative = c->p < c->end && *c->p == '-';
    c->p += negative;
    if (c->p >= c->end || *c->p < '0' || *c->p > '9') return -1;
    uint64_t limit = negative ? (uint64_t)0 - (uint64_t)low : (uint64_t)high, n = 0;
    if (*c->p == '0') c->p++;
    else
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            uint64_t digit = *c->p++ - '0';
            if (n > (limit - digit) / 10) return -1;
            n = n * 10 + digit;
        }
    *value = negative ? (int64_t)((uint64_t)0 - n) : (int64_t)n;
    return 0;
}

static int take_bytes_or_null(Cursor *c, Column *col, int *null) {
    *null = take_null(c);
    return *null ? 0 : take_base64(c, col);
}

static int take_headers(Cursor *c, Batch *b) {
    if (expect(c, '[') < 0) return -1;
    skip_ws(c);
    if (c->p < c->end && *c->p == ']') {
        c->p++;
        return 0;
    }
    do {
        int null;
        if (expect(c, '[') < 0 || take_text(c, &b->header_names) < 0 || expect(c, ',') < 0
            || take_bytes_or_null(c, &b->header_values, &null) < 0 || expect(c, ']') < 0
            || column_end_row(&b->header_names, 0) < 0 || column_end_row(&b->header_values, null) < 0)
            return -1;
    } while (take_comma(c));
    return expect(c, ']');
}

static int member(const unsigned char *name, Py_ssize_t len) {
    for (int m = 0; m < MEMBERS; m++)
        if ((Py_ssize_t)strlen(MEMBER_NAMES[m]) == len && memcmp(MEMBER_NAMES[m], name, len) == 0) return m;
    return -1;
}

/* A line as read from the file, its end included: the Python reader's blank lines are skipped. */
static int read_line(Batch *b, const unsigned char *line, Py_ssize_t size) {
    Cursor c = {line, line + size};
    int seen = 0, key_null = 1, value_null = 0, timestamp_null = 1;
    int64_t partition = 0, offset = 0, timestamp = 0;
    skip_ws(&c);
    if (c.p == c.end) return 0;
    if (expect(&c, '{') < 0) return -1;
    do {
        const unsigned char *name;
        Py_ssize_t len;
        if (take_plain_string(&c, &name, &len) < 0 || expect(&c, ':') < 0) return -1;
        int m = member(name, len);
        if (m < 0 || seen & (1 << m)) return -1;  /* unknown members and duplicates: msgspec's own rules */
        seen |= 1 << m;
        int ok;
        switch (m) {
            case KEY: ok = take_bytes_or_null(&c, &b->key, &key_null); break;
            case VALUE: ok = take_bytes_or_null(&c, &b->value, &value_null); break;
            case TOPIC: ok = take_text(&c, &b->topic); break;
            case PARTITION: ok = take_int(&c, INT32_MIN, INT32_MAX, &partition); break;
            case OFFSET: ok = take_int(&c, INT64_MIN, INT64_MAX, &offset); break;
            case TIMESTAMP:  /* milliseconds, kept as microseconds */
                timestamp_null = take_null(&c);
                ok = timestamp_null ? 0 : take_int(&c, INT64_MIN / 1000, INT64_MAX / 1000, &timestamp);
                break;
            default: ok = take_headers(&c, b);
        }
        if (ok < 0) return -1;
    } while (take_comma(&c));
    if (expect(&c, '}') < 0) return -1;
    skip_ws(&c);
    if (c.p != c.end || (seen & REQUIRED) != REQUIRED) return -1;

    if (b->header_names.offsets.n / 4 - 1 > INT32_MAX) return -1;
    int32_t p32 = (int32_t)partition, headers = (int32_t)(b->header_names.offsets.n / 4 - 1);
    int64_t us = timestamp * 1000;
    b->timestamp_nulls += timestamp_null;
    if (put(&b->partition, (const char *)&p32, 4) < 0 || put(&b->offset, (const char *)&offset, 8) < 0
        || put(&b->timestamp, (const char *)&us, 8) < 0
        || set_bit(&b->timestamp_valid, b->rows, !timestamp_null) < 0
        || put(&b->header_offsets, (const char *)&headers, 4) < 0 || column_end_row(&b->key, key_null) < 0
        || column_end_row(&b->value, value_null) < 0 || column_end_row(&b->topic, 0) < 0)
        return -1;
    b->rows++;
    return 0;
}

static void batch_free(Batch *b) {
    column_free(&b->key);
    column_free(&b->value);
    column_free(&b->topic);
    column_free(&b->header_names);
    column_free(&b->header_values);
    buf_free(&b->partition);
    buf_free(&b->offset);
    buf_free(&b->timestamp);
    buf_free(&b->timestamp_valid);
    buf_free(&b->header_offsets);
}

static int batch_init(Batch *b, Py_ssize_t rows, Py_ssize_t text) {
    memset(b, 0, sizeof *b);
    /* Decoded base64 is at most 3/4 of the text, and values are nearly all of it: one allocation, trimmed. */
    if (column_init(&b->key, rows, 64, 1) < 0 || column_init(&b->value, rows, text / 4 * 3 + 4, 1) < 0
        || column_init(&b->topic, rows, 64, 0) < 0 || column_init(&b->header_names, 16, 64, 0) < 0
        || column_init(&b->header_values, 16, 64, 1) < 0 || grow(&b->partition, 4 * rows) < 0
        || grow(&b->offset, 8 * rows) < 0 || grow(&b->timestamp, 8 * rows) < 0
        || grow(&b->timestamp_valid, (rows + 7) / 8) < 0 || grow(&b->header_offsets, 4 * (rows + 1)) < 0)
        return -1;
    int32_t zero = 0;
    return put(&b->header_offsets, &zero, 4);
}

static PyObject *read_captured(PyObject *module, PyObject *lines) {
    if (!PyList_Check(lines)) {
        PyErr_SetString(PyExc_TypeError, "lines must be a list of bytes");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(lines), text = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *line = PyList_GET_ITEM(lines, i);
        if (!PyBytes_Check(line)) {
            PyErr_SetString(PyExc_TypeError, "lines must be a list of bytes");
            return NULL;
        }
        text += PyBytes_GET_SIZE(line);
    }
    Batch b;
    if (batch_init(&b, count, text) < 0) goto error;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *line = PyList_GET_ITEM(lines, i);
        if (read_line(&b, (const unsigned char *)PyBytes_AS_STRING(line), PyBytes_GET_SIZE(line)) < 0) {
            if (PyErr_Occurred()) goto error;
            batch_free(&b);
            Py_RETURN_NONE;
        }
    }
    if (b.rows == 0) {  /* blank lines only: the Python reader yields no batch for them */
        batch_free(&b);
        Py_RETURN_NONE;
    }
    PyObject *timestamp_valid = b.timestamp_nulls ? buf_finish(&b.timestamp_valid) : Py_NewRef(Py_None);
    PyObject *result = Py_BuildValue(
        "{snsNsNsNsNsNsNsNsNsNsNsn}", "rows", b.rows, "key", column_finish(&b.key), "value", column_finish(&b.value),
        "topic", column_finish(&b.topic), "partition", buf_finish(&b.partition), "offset", buf_finish(&b.offset),
        "timestamp", buf_finish(&b.timestamp), "timestamp_valid", timestamp_valid,
        "header_offsets", buf_finish(&b.header_offsets), "header_names", column_finish(&b.header_names),
        "header_values", column_finish(&b.header_values), "timestamp_nulls", b.timestamp_nulls);
    batch_free(&b);
    return result;
error:
    batch_free(&b);
    return NULL;
}

static PyMethodDef methods[] = {
    {"read_captured", read_captured, METH_O,
     "read_captured(lines: list[bytes]) -> dict | None\n\nThe Arrow buffers of the captured records the lines "
     "(as read, ends included) hold, or None where the Python reader must read them."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "cdclake.native._records", NULL, -1, methods};

PyMODINIT_FUNC PyInit__records(void) {
    init_b64();
    return PyModule_Create(&module);
}

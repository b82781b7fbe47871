/* Canal-JSON row messages → changelog columns, for the decoding tasks' hot loop.
 *
 * The compiled twin of CanalJson's decode for the common message: a row message (INSERT, UPDATE, DELETE, INIT)
 * of a layout the Python side described (column names, value kinds, key columns), every value a string or
 * null. It writes each event's changelog values straight into Arrow buffers. Anything it is not certain to
 * decode exactly as the Python decoder does (DDL, watermarks, escapes where they matter, unusual spellings,
 * values that do not fit, columns the layout does not list, ...) is not guessed at: the record is left to the
 * Python decoder, which decodes it or says why it cannot. tests/formats/canal/test_compiled.py holds the two to
 * each other, byte for byte.
 */
#include "common.h"
#include <float.h>
#include <math.h>

/* Value kinds; the Python side (canal_json._compiled_kind) names the same numbers. */
enum { K_TEXT, K_INT, K_FLOAT, K_DECIMAL, K_BINARY, K_ENUM_NUMBER, K_ENUM_LABEL, K_BOOL, K_TS_UTC, K_SET_LABEL };
/* Ops, as indexes into the Python side's op strings. */
enum { OP_INSERT, OP_UPDATE, OP_DELETE, OP_READ };

enum { HANDLED = 0, LEFT = 1, FAILED = -1 }; /* LEFT: the Python decoder takes the record */

/* An Arrow string column being built: values are written into data, then ended with end_string. */
typedef struct {
    Buf data, offsets, valid;
} Strings;

static int end_string(Strings *s, Py_ssize_t row, int valid) {
    if (s->data.n > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "a changelog column passed 2 GiB in one batch");
        return -1;
    }
    int32_t end = (int32_t)s->data.n;
    if (put(&s->offsets, &end, 4)) return -1;
    return set_bit(&s->valid, row, valid);
}

typedef struct {
    Py_ssize_t ncols, nkeys;
    const char **names; /* UTF-8, as a row's member names must spell them */
    Py_ssize_t *name_len;
    const char **name_json; /* "name": as the image's JSON writes it */
    Py_ssize_t *name_json_len;
    int *kinds;
    PyObject **labels; /* ENUM / SET labels (a list of UTF-8 bytes) of each column */
    Py_ssize_t *keys; /* key columns, in the changelog's key order */
    int32_t id;
    PyObject *hold; /* the bytes the pointers point into */
} Layout;

static void layout_free(PyObject *capsule) {
    Layout *l = PyCapsule_GetPointer(capsule, "cdclake.native._canal.Layout");
    if (!l) return;
    Py_XDECREF(l->hold);
    PyMem_Free(l->names);
    PyMem_Free(l->name_len);
    PyMem_Free(l->name_json);
    PyMem_Free(l->name_json_len);
    PyMem_Free(l->kinds);
    PyMem_Free(l->labels);
    PyMem_Free(l->keys);
    PyMem_Free(l);
}

/* A layout from the Python side's description (id, names, names as JSON, kinds, labels, key indexes). */
static Layout *layout_new(PyObject *described) {
    PyObject *names, *jsons, *kinds, *labels, *keys;
    int id;
    if (!PyArg_ParseTuple(described, "iO!O!O!O!O!", &id, &PyList_Type, &names, &PyList_Type, &jsons, &PyList_Type,
                          &kinds, &PyList_Type, &labels, &PyList_Type, &keys))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(names), k = PyList_GET_SIZE(keys);
    if (PyList_GET_SIZE(jsons) != n || PyList_GET_SIZE(kinds) != n || PyList_GET_SIZE(labels) != n) {
        PyErr_SetString(PyExc_ValueError, "a layout's lists differ in length");
        return NULL;
    }
    Layout *l = PyMem_Calloc(1, sizeof(Layout));
    if (!l) return (Layout *)PyErr_NoMemory();
    l->ncols = n;
    l->nkeys = k;
    l->id = id;
    l->names = PyMem_Calloc((size_t)n + 1, sizeof(char *));
    l->name_len = PyMem_Calloc((size_t)n + 1, sizeof(Py_ssize_t));
    l->name_json = PyMem_Calloc((size_t)n + 1, sizeof(char *));
    l->name_json_len = PyMem_Calloc((size_t)n + 1, sizeof(Py_ssize_t));
    l->kinds = PyMem_Calloc((size_t)n + 1, sizeof(int));
    l->labels = PyMem_Calloc((size_t)n + 1, sizeof(PyObject *));
    l->keys = PyMem_Calloc((size_t)k + 1, sizeof(Py_ssize_t));
    l->hold = Py_BuildValue("(OOO)", names, jsons, labels);
    if (!l->names || !l->name_len || !l->name_json || !l->name_json_len || !l->kinds || !l->labels || !l->keys ||
        !l->hold)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        char *s;
        if (PyBytes_AsStringAndSize(PyList_GET_ITEM(names, i), &s, &l->name_len[i])) goto fail;
        l->names[i] = s;
        if (PyBytes_AsStringAndSize(PyList_GET_ITEM(jsons, i), &s, &l->name_json_len[i])) goto fail;
        l->name_json[i] = s;
        l->kinds[i] = (int)PyLong_AsLong(PyList_GET_ITEM(kinds, i));
        l->labels[i] = PyList_GET_ITEM(labels, i);
        if (!PyList_Check(l->labels[i])) {
            PyErr_SetString(PyExc_TypeError, "a column's labels are not a list");
            goto fail;
        }
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(l->labels[i]); j++)
            if (!PyBytes_Check(PyList_GET_ITEM(l->labels[i], j))) {
                PyErr_SetString(PyExc_TypeError, "a label is not bytes");
                goto fail;
            }
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        l->keys[i] = PyLong_AsSsize_t(PyList_GET_ITEM(keys, i));
        if (l->keys[i] < 0 || l->keys[i] >= n) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a key index out of range");
            goto fail;
        }
    }
    if (PyErr_Occurred()) goto fail;
    return l;
fail:;
    PyObject *capsule = PyCapsule_New(l, "cdclake.native._canal.Layout", layout_free);
    Py_XDECREF(capsule);
    if (!PyErr_Occurred()) PyErr_NoMemory();
    return NULL;
}

/* ------------------------------------------------------------------------- JSON, as only Canal reads it */

static inline const char *skip_zeros(const char *p, const char *e) {
    uint64_t w;
    while (e - p >= 8 && (memcpy(&w, p, 8), w == 0x3030303030303030ull)) p += 8;
    while (p < e && *p == '0') p++;
    return p;
}

/* scan_string, from the tape where it holds the string at p. */
static const char *scan_taped(Tape *t, const char *p, const char *e, const char **s, Py_ssize_t *n, int *flags) {
    if (t->next < t->n && t->tokens[t->next].at == p) {
        const Token *k = &t->tokens[t->next++];
        *s = k->s;
        *n = k->n;
        *flags = k->flags;
        return k->s + k->n + 1;
    }
    return scan_string(p, e, s, n, flags);
}

/* A JSON integer that fits an int64 with room to spare (at most 18 digits). */
static const char *scan_int64(const char *p, const char *e, int64_t *out) {
    int integral;
    const char *end = scan_number(p, e, &integral);
    if (!end || !integral) return NULL;
    const char *d = p + (*p == '-');
    if (end - d > 18) return NULL;
    int64_t v = 0;
    for (; d < end; d++) v = v * 10 + (*d - '0');
    *out = *p == '-' ? -v : v;
    return end;
}

static int put_utf8(Buf *b, uint32_t cp) {
    char u[4];
    int n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return put(b, u, n);
}

/* A string's text with its escapes resolved, into out (emptied first): HANDLED, LEFT (an escape msgspec
 * would read otherwise, such as a lone surrogate) or FAILED. */
static int unescape(Buf *out, const char *s, Py_ssize_t n) {
    out->n = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        char c = s[i];
        if (c != '\\') {
            if (put1(out, c)) return FAILED;
            continue;
        }
        if (++i >= n) return LEFT;
        char r;
        switch (s[i]) {
        case '"': r = '"'; break;
        case '\\': r = '\\'; break;
        case '/': r = '/'; break;
        case 'b': r = '\b'; break;
        case 'f': r = '\f'; break;
        case 'n': r = '\n'; break;
        case 'r': r = '\r'; break;
        case 't': r = '\t'; break;
        case 'u': {
            uint32_t cp, low;
            if (i + 4 >= n || !hex4(s + i + 1, &cp)) return LEFT;
            i += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return LEFT;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (i + 6 >= n || s[i + 1] != '\\' || s[i + 2] != 'u' || !hex4(s + i + 3, &low) || low < 0xDC00 ||
                    low > 0xDFFF)
                    return LEFT;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                i += 6;
            }
            if (put_utf8(out, cp)) return FAILED;
            continue;
        }
        default:
            return LEFT;
        }
        if (put1(out, r)) return FAILED;
    }
    return HANDLED;
}

/* Whether each escape in a string's text is the one put_json_string writes for the character it stands for:
 * then the text is already as msgspec writes it (producers escape quotes in JSON columns, for one). */
static int escapes_as_written(const char *s, Py_ssize_t n) {
    const char *p = s, *e = s + n;
    while ((p = memchr(p, '\\', (size_t)(e - p))) != NULL) {
        if (e - p < 2) return 0;
        switch (p[1]) {
        case '"': case '\\': case 'n': case 'r': case 't': case 'b': case 'f':
            p += 2;
            continue;
        case 'u': {
            if (e - p < 6 || p[2] != '0' || p[3] != '0' || (p[4] != '0' && p[4] != '1')) return 0;
            const char *digit = strchr(HEX, p[5]);
            if (!p[5] || !digit) return 0;
            int c = (p[4] - '0') * 16 + (int)(digit - HEX);
            if (c == '\b' || c == '\t' || c == '\n' || c == '\f' || c == '\r') return 0; /* written short */
            p += 6;
            continue;
        }
        default:
            return 0;
        }
    }
    return 1;
}

/* --------------------------------------------------------------------------------------------- values */

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int ascii_digits(const char *s, Py_ssize_t n) {
    if (n == 0) return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!is_digit(s[i])) return 0;
    return 1;
}

static int ascii(const char *s, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80) return 0;
    return 1;
}

/* msgspec's own JSON encoder, which writes every other float of the changelog (set at import). */
static PyObject *float_encode;

/* A float as msgspec writes it, by msgspec itself: its shortest-digits formatting is much cheaper than Python's
 * repr for a double of a large or small exponent (figures: benchmarks/results.md, "Native helpers"). */
static int put_float(Buf *b, double d) {
    PyObject *number = PyFloat_FromDouble(d);
    if (!number) return -1;
    PyObject *text = PyObject_CallOneArg(float_encode, number);
    Py_DECREF(number);
    if (!text) return -1;
    int rc = put(b, PyBytes_AS_STRING(text), PyBytes_GET_SIZE(text));
    Py_DECREF(text);
    return rc;
}

/* Plain notation with 1 to 15 significant digits, between 1e-5 and 1e15, no trailing zero in the fraction: the
 * shortest text of the double it parses to has the same digits (any 15 digits survive text -> double -> text),
 * so msgspec would write that very text (".0" added to a whole number). 1 if written, 0 if not such a text. */
static int put_plain_float(Buf *b, const char *s, Py_ssize_t n) {
    const char *p = s + (*s == '-'), *e = s + n;
    const char *point = memchr(p, '.', (size_t)(e - p));
    if (memchr(p, 'e', (size_t)(e - p)) || memchr(p, 'E', (size_t)(e - p))) return 0;
    Py_ssize_t whole = (point ? point : e) - p, significant;
    if (whole == 1 && *p == '0') {
        if (!point) return 0;
        const char *q = point + 1;
        while (q < e && *q == '0' && q - point <= 5) q++; /* five zeros already say no */
        if (q - point - 1 > 4 || q == e) return 0;
        significant = e - q;
    } else {
        significant = whole + (point ? e - point - 1 : 0);
    }
    if (significant > 15 || (point && e[-1] == '0')) return 0;
    if (put(b, s, n) || (!point && put(b, ".0", 2))) return -1;
    return 1;
}

/* 5^q scaled into [2^127, 2^128), for q from POW5_MIN to POW5_MAX: floor(5^q * 2^shift) in hi:lo (set at import by
 * cdclake.native.compiled.powers_of_five, which says how they are made). */
typedef struct {
    uint64_t hi, lo;
    int64_t shift;
} Power;
#define POW5_MIN (-342)
#define POW5_MAX 308
static const Power *pow5;
static PyObject *pow5_table; /* the bytes pow5 points into, held for the module's life */

/* The double nearest a JSON number's text (its syntax checked, at most 511 bytes), as strtod finds it. glibc's
 * strtod is slow for the long, tiny doubles TiCDC writes in full (benchmarks/results.md, "Native helpers"), so
 * this tries two exact shortcuts first and asks strtod only where they cannot decide:
 *  - at most 2^53 for the digits and |exponent| <= 22: both are exact doubles, and one IEEE multiplication or
 *    division rounds their product correctly (Clinger);
 *  - otherwise, up to 19 significant digits: the digits times 5^q from the table, kept to 128 bits, lie within 2
 *    units of the last bit of the exact product (the table's floor and the dropped low word each err by less
 *    than 1). Unless the bits below the rounding bit are within 3 of all zeros or all ones, those 2 units cannot
 *    change the rounding, nor make it a tie (after Eisel and Lemire's method). Subnormals and overflow go to
 *    strtod too. */
static double parse_double(const char *s, Py_ssize_t n) {
    const char *p = s, *e = s + n;
    int negative = *p == '-';
    uint64_t w = 0;
    int digits = 0, fraction = 0, zeros = 0; /* zeros: trailing so far, not yet in w */
    int64_t q;
    p += negative;
    for (int point = 0; p < e; p++) {
        if (*p == '.') {
            point = 1;
            continue;
        }
        if (!is_digit(*p)) break;
        if (*p == '0') { /* a run of them: TiCDC writes 1e-300 with 299 zeros in front */
            const char *z = skip_zeros(p, e);
            fraction += point ? (int)(z - p) : 0;
            zeros += w ? (int)(z - p) : 0;
            p = z - 1;
            continue;
        }
        digits += zeros + 1;
        if (digits > 19) goto slow;
        for (; zeros; zeros--) w *= 10;
        w = w * 10 + (uint64_t)(*p - '0');
        fraction += point;
    }
    q = zeros - fraction;
    if (p < e) { /* the exponent */
        int64_t x = 0, sign = 1;
        p++;
        if (*p == '+' || *p == '-') sign = *p++ == '-' ? -1 : 1;
        for (; p < e; p++) {
            if (x > 100000) goto slow;
            x = x * 10 + (*p - '0');
        }
        q += sign * x;
    }
    if (!w) return negative ? -0.0 : 0.0;
#if FLT_EVAL_METHOD == 0
    static const double tens[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                  1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    if (w <= (1ull << 53) && q >= -22 && q <= 22) {
        double d = q < 0 ? (double)w / tens[-q] : (double)w * tens[q];
        return negative ? -d : d;
    }
#endif
#if defined(__SIZEOF_INT128__)
    if (pow5 && q >= POW5_MIN && q <= POW5_MAX) {
        const Power *t = &pow5[q - POW5_MIN];
        int lead = __builtin_clzll(w);
        w <<= lead;
        unsigned __int128 product = (unsigned __int128)w * t->hi + (uint64_t)(((unsigned __int128)w * t->lo) >> 64);
        uint64_t hi = (uint64_t)(product >> 64), lo = (uint64_t)product;
        int upper = (int)(hi >> 63), shift = 9 + upper; /* 54 bits kept: 53 and the rounding bit */
        uint64_t below = hi & ((1ull << shift) - 1);
        if ((below == 0 && lo < 3) || (below == (1ull << shift) - 1 && lo > UINT64_MAX - 3)) goto slow;
        uint64_t m = hi >> shift;
        m = (m + (m & 1)) >> 1;
        int64_t exponent = 190 + upper + q - t->shift - lead + 1023;
        if (m == 1ull << 53) {
            m >>= 1;
            exponent++;
        }
        if (exponent <= 0 || exponent >= 2047) goto slow;
        uint64_t bits = (m & ((1ull << 52) - 1)) | (uint64_t)exponent << 52 | (uint64_t)negative << 63;
        double d;
        memcpy(&d, &bits, 8);
        return d;
    }
#endif
slow:;
    char text[512];
    memcpy(text, s, (size_t)n);
    text[n] = 0;
    return strtod(text, NULL);
}

static int days_in_month(int y, int m) {
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0)) return 29;
    return days[m - 1];
}

static int two(const char *s) { return (s[0] - '0') * 10 + (s[1] - '0'); }

/* "YYYY-MM-DD HH:MM:SS[.digits]" as UTC, valid as a date and clock: "YYYY-MM-DDTHH:MM:SS[.digits]Z". */
static int put_utc_timestamp(Buf *b, const char *s, Py_ssize_t n) {
    static const char shape[] = "dddd-dd-dd dd:dd:dd";
    if (n < 19 || n == 20) return LEFT;
    for (int i = 0; i < 19; i++)
        if (shape[i] == 'd' ? !is_digit(s[i]) : s[i] != shape[i]) return LEFT;
    if (n > 19 && (s[19] != '.' || !ascii_digits(s + 20, n - 20))) return LEFT;
    int year = two(s) * 100 + two(s + 2), month = two(s + 5), day = two(s + 8);
    if (year < 1 || month < 1 || month > 12 || day < 1 || day > days_in_month(year, month) || two(s + 11) > 23 ||
        two(s + 14) > 59 || two(s + 17) > 59)
        return LEFT;
    if (grow(b, n + 3)) return FAILED;
    b->p[b->n++] = '"';
    memcpy(b->p + b->n, s, (size_t)n);
    b->p[b->n + 10] = 'T';
    b->n += n;
    b->p[b->n++] = 'Z';
    b->p[b->n++] = '"';
    return HANDLED;
}

/* One value's canonical JSON (s: the JSON string's raw content, or NULL for null): HANDLED, LEFT or FAILED. */
static int put_value(Buf *b, Buf *scratch, int kind, PyObject *labels, const char *s, Py_ssize_t n, int flags) {
    if (!s) return put(b, "null", 4) ? FAILED : HANDLED;
    if ((flags & HIGH) && !(flags & UTF8_OK) && !utf8_valid((const unsigned char *)s, n)) return LEFT;
    const char *raw = s;
    Py_ssize_t raw_n = n;
    if (kind == K_TEXT && (flags & ESCAPED) && escapes_as_written(s, n)) flags &= ~ESCAPED;
    if (flags & ESCAPED) {
        int rc = unescape(scratch, s, n);
        if (rc != HANDLED) return rc;
        s = scratch->p;
        n = scratch->n;
    }
    switch (kind) {
    case K_DECIMAL:
        if (memchr(s, 'e', (size_t)n) || memchr(s, 'E', (size_t)n)) return LEFT;
        /* fall through: the text is the value */
    case K_TEXT:
        if (!(flags & ESCAPED)) { /* nothing to escape: copied as it came */
            if (grow(b, raw_n + 2)) return FAILED;
            b->p[b->n++] = '"';
            memcpy(b->p + b->n, raw, (size_t)raw_n);
            b->n += raw_n;
            b->p[b->n++] = '"';
            return HANDLED;
        }
        return put_json_string(b, s, n) ? FAILED : HANDLED;
    case K_INT: {
        const char *d = s + (n && *s == '-');
        Py_ssize_t digits = n - (d - s);
        /* only the canonical spelling is copied: "-0", "007" and the like are Python's to normalise, and
         * numbers longer than any integer column holds (Python refuses those of thousands of digits) */
        if (digits > 20 || !ascii_digits(d, digits) || (*d == '0' && (digits > 1 || d != s))) return LEFT;
        return put(b, s, n) ? FAILED : HANDLED;
    }
    case K_FLOAT: {
        int integral;
        /* TiCDC writes plain notation: up to ~330 characters for a double */
        if (n == 0 || n > 511 || scan_number(s, s + n, &integral) != s + n) return LEFT;
        int plain = put_plain_float(b, s, n);
        if (plain) return plain < 0 ? FAILED : HANDLED;
        double d = parse_double(s, n);
        if (!isfinite(d)) return LEFT; /* overflow: as the Python path decides */
        if (d == 0.0) { /* a negative zero keeps its sign or not by its spelling ("-0" or "-0.0"): Python's */
            if (*s == '-') return LEFT;
            return put(b, "0.0", 3) ? FAILED : HANDLED;
        }
        return put_float(b, d) ? FAILED : HANDLED;
    }
    case K_BINARY: { /* ISO-8859-1 characters, one per byte, as base64 */
        Buf *bytes = scratch;
        if (!(flags & ESCAPED)) {
            bytes->n = 0;
            if (put(bytes, s, n)) return FAILED;
        }
        Py_ssize_t out = 0;
        const unsigned char *u = (const unsigned char *)bytes->p;
        for (Py_ssize_t i = 0; i < bytes->n; i++) {
            if (u[i] < 0x80) {
                bytes->p[out++] = (char)u[i];
            } else if ((u[i] == 0xC2 || u[i] == 0xC3) && i + 1 < bytes->n) {
                bytes->p[out++] = (char)(((u[i] & 0x03) << 6) | (u[i + 1] & 0x3F));
                i++;
            } else {
                return LEFT; /* beyond ISO-8859-1 */
            }
        }
        if (grow(b, (out + 2) / 3 * 4 + 2)) return FAILED;
        char *w = b->p + b->n;
        *w++ = '"';
        u = (const unsigned char *)bytes->p;
        Py_ssize_t i = 0;
        for (; i + 2 < out; i += 3) {
            uint32_t v = (uint32_t)u[i] << 16 | (uint32_t)u[i + 1] << 8 | u[i + 2];
            *w++ = B64[v >> 18];
            *w++ = B64[(v >> 12) & 63];
            *w++ = B64[(v >> 6) & 63];
            *w++ = B64[v & 63];
        }
        if (i < out) {
            uint32_t v = (uint32_t)u[i] << 16 | (i + 1 < out ? (uint32_t)u[i + 1] << 8 : 0);
            *w++ = B64[v >> 18];
            *w++ = B64[(v >> 12) & 63];
            *w++ = i + 1 < out ? B64[(v >> 6) & 63] : '=';
            *w++ = '=';
        }
        *w++ = '"';
        b->n = w - b->p;
        return HANDLED;
    }
    case K_ENUM_NUMBER: /* no labels: a number is the value, any other text stays */
        if (!ascii(s, n)) return LEFT;
        if (ascii_digits(s, n)) {
            while (n > 1 && *s == '0') {
                s++;
                n--;
            }
            return put(b, s, n) ? FAILED : HANDLED;
        }
        return put_json_string(b, s, n) ? FAILED : HANDLED;
    case K_ENUM_LABEL:
    case K_SET_LABEL: { /* a number is an index (ENUM, from 1; 0 and out of range: "") or a mask of labels (SET) */
        if (!ascii(s, n)) return LEFT;
        if (!ascii_digits(s, n)) return put_json_string(b, s, n) ? FAILED : HANDLED;
        while (n > 1 && *s == '0') {
            s++;
            n--;
        }
        if (n > 18) return LEFT;
        int64_t number = 0;
        for (Py_ssize_t i = 0; i < n; i++) number = number * 10 + (s[i] - '0');
        Py_ssize_t count = PyList_GET_SIZE(labels);
        Buf *text = scratch;
        text->n = 0;
        for (Py_ssize_t i = 0; i < count; i++) {
            int chosen = kind == K_ENUM_LABEL ? number == i + 1 : i < 63 && (number >> i & 1);
            if (!chosen) continue;
            PyObject *label = PyList_GET_ITEM(labels, i);
            if ((text->n && kind == K_SET_LABEL && put1(text, ',')) ||
                put(text, PyBytes_AS_STRING(label), PyBytes_GET_SIZE(label)))
                return FAILED;
        }
        if (kind == K_SET_LABEL && count > 63 && number >> 63) return LEFT;
        return put_json_string(b, text->p, text->n) ? FAILED : HANDLED;
    }
    case K_BOOL: {
        if (!ascii(s, n)) return LEFT;
        int yes = (n == 1 && (*s == '1' || *s == 't' || *s == 'T')) ||
                  (n == 4 && (s[0] | 32) == 't' && (s[1] | 32) == 'r' && (s[2] | 32) == 'u' && (s[3] | 32) == 'e');
        return put(b, yes ? "true" : "false", yes ? 4 : 5) ? FAILED : HANDLED;
    }
    case K_TS_UTC:
        return put_utc_timestamp(b, s, n);
    }
    return LEFT;
}

/* ------------------------------------------------------------------------------------------------ rows */

typedef struct {
    const char *s; /* NULL: the value is null */
    Py_ssize_t n;
    int flags;
    int present;
    Py_ssize_t at, len; /* the rendered value in the row's buffer */
} Slot;

/* One row object into its slots, each present value rendered into out. */
static int read_row(const Layout *l, const char **pp, const char *e, Tape *tape, Slot *slots, Buf *out,
                    Buf *scratch) {
    const char *p = *pp;
    if (p >= e || *p != '{') return LEFT;
    for (Py_ssize_t i = 0; i < l->ncols; i++) slots[i].present = 0;
    out->n = 0;
    p = ws(p + 1, e);
    if (p < e && *p == '}') {
        *pp = p + 1;
        return HANDLED;
    }
    Py_ssize_t guess = 0;
    for (;;) {
        const char *name;
        Py_ssize_t name_n;
        int flags;
        if (p >= e || *p != '"') return LEFT;
        p = scan_taped(tape, p, e, &name, &name_n, &flags);
        if (!p || (flags & ESCAPED)) return LEFT;
        Py_ssize_t col = -1;
        for (Py_ssize_t k = 0; k < l->ncols; k++) { /* rows list their columns in the layout's order, as a rule */
            Py_ssize_t c = (guess + k) % l->ncols;
            if (l->name_len[c] == name_n && !memcmp(l->names[c], name, (size_t)name_n)) {
                col = c;
                break;
            }
        }
        if (col < 0 || slots[col].present) return LEFT; /* a column the layout lacks, or twice */
        guess = col + 1;
        p = ws(p, e);
        if (p >= e || *p != ':') return LEFT;
        p = ws(p + 1, e);
        Slot *slot = &slots[col];
        slot->present = 1;
        if (is_null(p, e)) {
            slot->s = NULL;
            p += 4;
        } else if (p < e && *p == '"') {
            p = scan_taped(tape, p, e, &slot->s, &slot->n, &slot->flags);
            if (!p) return LEFT;
        } else {
            return LEFT;
        }
        slot->at = out->n;
        int rc = put_value(out, scratch, l->kinds[col], l->labels[col], slot->s, slot->n, slot->flags);
        if (rc != HANDLED) return rc;
        slot->len = out->n - slot->at;
        p = ws(p, e);
        if (p < e && *p == '}') break;
        if (p >= e || *p != ',') return LEFT;
        p = ws(p + 1, e);
    }
    *pp = p + 1;
    return HANDLED;
}

/* ------------------------------------------------------------------------------------------- the output */

typedef struct {
    Buf record, seq, op, layout, commit_ts, ts_ms, ts_ms_valid;
    Strings database, table, key, before_key, after, position;
    Py_ssize_t events;
} Out;

#define OUT_BUFS 25
static void out_bufs(Out *o, Buf **all) {
    Buf *list[OUT_BUFS] = {&o->record, &o->seq, &o->op, &o->layout, &o->commit_ts, &o->ts_ms, &o->ts_ms_valid,
                           &o->database.data, &o->database.offsets, &o->database.valid, &o->table.data,
                           &o->table.offsets, &o->table.valid, &o->key.data, &o->key.offsets, &o->key.valid,
                           &o->before_key.data, &o->before_key.offsets, &o->before_key.valid, &o->after.data,
                           &o->after.offsets, &o->after.valid, &o->position.data, &o->position.offsets,
                           &o->position.valid};
    memcpy(all, list, sizeof(list));
}

typedef struct {
    Py_ssize_t n[OUT_BUFS];
    Py_ssize_t events;
} Mark;

static void mark(Out *o, Mark *m) {
    Buf *all[OUT_BUFS];
    out_bufs(o, all);
    for (int i = 0; i < OUT_BUFS; i++) m->n[i] = all[i]->n;
    m->events = o->events;
}

/* Back to the mark: a record left to Python leaves nothing behind. Bitmaps keep their bytes; bits past
 * the mark are written again before they count. */
static void rewind_to(Out *o, const Mark *m) {
    Buf *all[OUT_BUFS];
    out_bufs(o, all);
    for (int i = 0; i < OUT_BUFS; i++) all[i]->n = m->n[i];
    o->events = m->events;
}

static void out_free(Out *o) {
    Buf *all[OUT_BUFS];
    out_bufs(o, all);
    for (int i = 0; i < OUT_BUFS; i++) buf_free(all[i]);
}

static int put_padded(Buf *b, int64_t v) { /* "%020d" */
    char text[21];
    for (int i = 19; i >= 0; i--) {
        text[i] = (char)('0' + v % 10);
        v /= 10;
    }
    return put(b, text, 20);
}

/* A string member's value: HANDLED with its span (s NULL for null) and flags, or LEFT. */
static int text_member(const char **pp, const char *e, const char **s, Py_ssize_t *n, int *flags) {
    const char *p = *pp;
    *flags = 0;
    if (is_null(p, e)) {
        *s = NULL;
        *pp = p + 4;
        return HANDLED;
    }
    if (p >= e || *p != '"') return LEFT;
    p = scan_string(p, e, s, n, flags);
    if (!p || ((*flags & HIGH) && !utf8_valid((const unsigned char *)*s, *n))) return LEFT;
    *pp = p;
    return HANDLED;
}

/* A name's text into b, its escapes resolved: HANDLED, LEFT or FAILED. */
static int put_name(Buf *b, Buf *scratch, const char *s, Py_ssize_t n, int flags) {
    if (!(flags & ESCAPED)) return put(b, s, n) ? FAILED : HANDLED;
    int rc = unescape(scratch, s, n);
    if (rc != HANDLED) return rc;
    return put(b, scratch->p, scratch->n) ? FAILED : HANDLED;
}

typedef struct {
    PyObject *layout_of; /* callable(types_raw, pk_raw) -> description or None */
    PyObject *cache;     /* dict: types_raw + b"\0" + pk_raw -> capsule or None */
    Layout *last;
    PyObject *last_key;
    Slot *data_slots, *old_slots;
    Py_ssize_t slots_cap;
    Buf data_row, old_row, scratch;
    Buf seen_types, seen_pk, seen_codes; /* the last mysqlType, pkNames and sqlType checked */
    Tape data_tape, old_tape;            /* this message's */
} Ctx;

/* skip_value for a member that repeats from message to message (a table's mysqlType, pkNames, sqlType): the
 * bytes of the last object or array it checked are compared instead of scanned again. Equal bytes are the same
 * value, since an object or array ends itself. */
static const char *skip_repeated(Buf *seen, const char *p, const char *e) {
    if (seen->n && e - p >= seen->n && !memcmp(p, seen->p, (size_t)seen->n)) return p + seen->n;
    const char *end = skip_value(p, e, 0, NULL);
    seen->n = 0;
    if (end && (*p == '{' || *p == '[') && put(seen, p, end - p)) {
        PyErr_Clear(); /* out of memory for the copy: the next message is scanned instead */
        seen->n = 0;
    }
    return end;
}

static int find_layout(Ctx *x, const char *types, Py_ssize_t types_n, const char *pk, Py_ssize_t pk_n, Layout **out) {
    if (x->last_key) {
        const char *k = PyBytes_AS_STRING(x->last_key);
        if (PyBytes_GET_SIZE(x->last_key) == types_n + 1 + pk_n && !memcmp(k, types, (size_t)types_n) &&
            !memcmp(k + types_n + 1, pk, (size_t)pk_n)) {
            *out = x->last;
            return x->last ? HANDLED : LEFT;
        }
    }
    PyObject *key = PyBytes_FromStringAndSize(NULL, types_n + 1 + pk_n);
    if (!key) return FAILED;
    char *k = PyBytes_AS_STRING(key);
    memcpy(k, types, (size_t)types_n);
    k[types_n] = 0;
    memcpy(k + types_n + 1, pk, (size_t)pk_n);
    PyObject *found = PyDict_GetItemWithError(x->cache, key); /* borrowed */
    if (!found) {
        if (PyErr_Occurred()) goto fail;
        PyObject *described = PyObject_CallFunction(x->layout_of, "y#y#", types, types_n, pk, pk_n);
        if (!described) goto fail;
        if (described == Py_None) {
            found = Py_None;
        } else {
            Layout *l = layout_new(described);
            Py_DECREF(described);
            if (!l) goto fail;
            found = PyCapsule_New(l, "cdclake.native._canal.Layout", layout_free);
            if (!found) goto fail;
            if (PyDict_SetItem(x->cache, key, found)) {
                Py_DECREF(found);
                goto fail;
            }
            Py_DECREF(found); /* the cache holds it */
        }
        if (found == Py_None && PyDict_SetItem(x->cache, key, Py_None)) goto fail;
    }
    Py_XSETREF(x->last_key, key);
    x->last = found == Py_None ? NULL : PyCapsule_GetPointer(found, "cdclake.native._canal.Layout");
    *out = x->last;
    return x->last ? HANDLED : LEFT;
fail:
    Py_DECREF(key);
    return FAILED;
}

static int ensure_slots(Ctx *x, Py_ssize_t n) {
    if (n <= x->slots_cap) return 0;
    Slot *a = realloc(x->data_slots, sizeof(Slot) * (size_t)n), *b;
    if (!a) goto fail;
    x->data_slots = a;
    b = realloc(x->old_slots, sizeof(Slot) * (size_t)n);
    if (!b) goto fail;
    x->old_slots = b;
    x->slots_cap = n;
    return 0;
fail:
    PyErr_NoMemory();
    return -1;
}

/* A key as the changelog writes it: the key columns' values as a JSON array (from `prefer` where present). */
static int put_key(Buf *b, const Layout *l, const Slot *prefer, const Buf *prefer_row, const Slot *slots,
                   const Buf *row) {
    if (put1(b, '[')) return -1;
    for (Py_ssize_t k = 0; k < l->nkeys; k++) {
        Py_ssize_t c = l->keys[k];
        const Slot *s = prefer && prefer[c].present ? &prefer[c] : &slots[c];
        const Buf *r = prefer && prefer[c].present ? prefer_row : row;
        if ((k && put1(b, ',')) || put(b, r->p + s->at, s->len)) return -1;
    }
    return put1(b, ']');
}

/* A record's message into events: HANDLED, LEFT or FAILED. */
static int decode_one(Ctx *x, Out *o, const char *p, const char *e, int64_t offset, int32_t record) {
    const char *data = NULL, *old = NULL, *types = NULL, *pk = NULL, *database = NULL, *table = NULL, *gtid = NULL;
    const char *types_end = NULL, *pk_end = NULL, *type = NULL;
    Py_ssize_t database_n = 0, table_n = 0, gtid_n = 0, type_n = 0;
    int database_flags = 0, table_flags = 0;
    int64_t es = 0, commit_ts = 0;
    int has_es = 0, has_commit = 0, seen = 0;
    x->data_tape.n = x->data_tape.next = x->old_tape.n = x->old_tape.next = 0;
    p = ws(p, e);
    if (p >= e || *p != '{') return LEFT;
    p = ws(p + 1, e);
    if (p < e && *p == '}') return LEFT;
    for (;;) {
        const char *name;
        Py_ssize_t n;
        int flags, bit;
        if (p >= e || *p != '"') return LEFT;
        p = scan_string(p, e, &name, &n, &flags);
        if (!p || (flags & ESCAPED)) return LEFT;
        p = ws(p, e);
        if (p >= e || *p != ':') return LEFT;
        p = ws(p + 1, e);
#define IS(lit) (n == (Py_ssize_t)sizeof(lit) - 1 && !memcmp(name, lit, sizeof(lit) - 1))
        if (IS("data") || IS("old") || IS("mysqlType") || IS("pkNames")) {
            bit = IS("data") ? 1 : IS("old") ? 2 : IS("mysqlType") ? 4 : 8;
            const char *start = p;
            if (bit == 4)
                p = skip_repeated(&x->seen_types, p, e);
            else if (bit == 8)
                p = skip_repeated(&x->seen_pk, p, e);
            else
                p = skip_value(p, e, 0, bit == 1 ? &x->data_tape : &x->old_tape);
            if (!p) return LEFT;
            if (bit == 1) data = start;
            if (bit == 2) old = start;
            if (bit == 4) types = start, types_end = p;
            if (bit == 8) pk = start, pk_end = p;
        } else if (IS("database") || IS("table") || IS("gtid") || IS("type") || IS("sql")) {
            bit = IS("database") ? 16 : IS("table") ? 32 : IS("gtid") ? 64 : IS("type") ? 128 : 256;
            const char *s;
            Py_ssize_t sn = 0;
            int sf;
            if (text_member(&p, e, &s, &sn, &sf) != HANDLED) return LEFT;
            if ((sf & ESCAPED) && bit != 16 && bit != 32) return LEFT; /* names only: the rest is plain ASCII */
            if (bit == 16) database = s, database_n = sn, database_flags = sf;
            if (bit == 32) table = s, table_n = sn, table_flags = sf;
            if (bit == 64) gtid = s, gtid_n = sn;
            if (bit == 128) type = s, type_n = sn;
        } else if (IS("es")) {
            bit = 512;
            if (is_null(p, e)) {
                p += 4;
            } else {
                p = scan_int64(p, e, &es);
                if (!p) return LEFT;
                has_es = 1;
            }
        } else if (IS("isDdl")) {
            bit = 1024;
            if (is_null(p, e))
                p += 4;
            else if (e - p >= 5 && !memcmp(p, "false", 5))
                p += 5;
            else
                return LEFT;
        } else if (IS("_tidb")) {
            bit = 2048;
            if (is_null(p, e)) {
                p += 4;
            } else { /* exactly {"commitTs": n}: anything else (handle keys only, claim checks) is Python's */
                if (*p != '{') return LEFT;
                p = ws(p + 1, e);
                const char *member;
                Py_ssize_t member_n;
                if (p >= e || *p != '"') return LEFT;
                p = scan_string(p, e, &member, &member_n, &flags);
                if (!p || member_n != 8 || memcmp(member, "commitTs", 8)) return LEFT;
                p = ws(p, e);
                if (p >= e || *p != ':') return LEFT;
                p = scan_int64(ws(p + 1, e), e, &commit_ts);
                if (!p) return LEFT;
                p = ws(p, e);
                if (p >= e || *p != '}') return LEFT;
                p++;
                has_commit = 1;
            }
        } else {
            bit = IS("sqlType") ? 4096 : 0; /* sqlType matters only for layouts the Python side keeps */
            p = bit ? skip_repeated(&x->seen_codes, p, e) : skip_value(p, e, 0, NULL);
            if (!p) return LEFT;
        }
#undef IS
        if (bit & seen) return LEFT;
        seen |= bit;
        p = ws(p, e);
        if (p < e && *p == '}') break;
        if (p >= e || *p != ',') return LEFT;
        p = ws(p + 1, e);
    }
    if (ws(p + 1, e) != e) return LEFT;
    if (!type || !table || !table_n || !data || !types || !pk) return LEFT;
    int op;
    if (type_n == 6 && !memcmp(type, "INSERT", 6))
        op = OP_INSERT;
    else if (type_n == 6 && !memcmp(type, "UPDATE", 6))
        op = OP_UPDATE;
    else if (type_n == 6 && !memcmp(type, "DELETE", 6))
        op = OP_DELETE;
    else if (type_n == 4 && !memcmp(type, "INIT", 4))
        op = OP_READ;
    else
        return LEFT;
    if (!has_commit && !has_es) return LEFT; /* no commit ts: ordered by its partition's, which Python works out */
    if (!has_commit && offset < 0) return LEFT; /* a position pads it: Python's spelling of a sign */
    int64_t txn = 0;
    if (!has_commit && gtid && gtid_n) { /* the GTID's transaction number: "uuid:n" or "domain-server-seq" */
        const char *tail = gtid, *end = gtid + gtid_n;
        for (const char *q = gtid; q < end; q++)
            if (*q == ':') tail = q + 1;
        for (const char *q = tail; q < end; q++)
            if (*q == '-') tail = q + 1;
        if (!ascii(tail, end - tail)) return LEFT;
        if (ascii_digits(tail, end - tail)) {
            while (end - tail > 1 && *tail == '0') tail++;
            if (end - tail > 18) return LEFT;
            for (; tail < end; tail++) txn = txn * 10 + (*tail - '0');
        }
    }
    Layout *l;
    int rc = find_layout(x, types, types_end - types, pk, pk_end - pk, &l);
    if (rc != HANDLED) return rc;
    if (ensure_slots(x, l->ncols)) return FAILED;

    /* The rows: data, and old beside each of an UPDATE's rows. */
    const char *d = ws(data, e), *q = NULL;
    if (*d != '[') return LEFT;
    d = ws(d + 1, e);
    if (*d == ']') return LEFT; /* no rows: the Python path says what that is */
    int with_old = 0;
    if (op == OP_UPDATE && old && !is_null(old, e)) {
        q = ws(old, e);
        if (*q != '[') return LEFT;
        q = ws(q + 1, e);
        with_old = 1;
    }
    for (int32_t row = 0;; row++) {
        rc = read_row(l, &d, e, &x->data_tape, x->data_slots, &x->data_row, &x->scratch);
        if (rc != HANDLED) return rc;
        if (with_old) {
            if (*q == ']') return LEFT; /* fewer old rows than data rows */
            rc = read_row(l, &q, e, &x->old_tape, x->old_slots, &x->old_row, &x->scratch);
            if (rc != HANDLED) return rc;
        }
        for (Py_ssize_t k = 0; k < l->nkeys; k++)
            if (!x->data_slots[l->keys[k]].present) return LEFT; /* a row without its key: Python says so */
        Py_ssize_t ev = o->events;
        int32_t layout_id = l->id;
        int8_t op8 = (int8_t)op;
        int64_t ts = has_es ? es : 0, commit = has_commit ? commit_ts : es;
        if (put(&o->record, &record, 4) || put(&o->seq, &row, 4) || put(&o->op, &op8, 1) ||
            put(&o->layout, &layout_id, 4) || put(&o->commit_ts, &commit, 8) || put(&o->ts_ms, &ts, 8) ||
            set_bit(&o->ts_ms_valid, ev, has_es))
            return FAILED;
        if (database && (rc = put_name(&o->database.data, &x->scratch, database, database_n, database_flags)))
            return rc;
        if (end_string(&o->database, ev, database != NULL)) return FAILED;
        if ((rc = put_name(&o->table.data, &x->scratch, table, table_n, table_flags))) return rc;
        if (end_string(&o->table, ev, 1)) return FAILED;
        if (put_key(&o->key.data, l, NULL, NULL, x->data_slots, &x->data_row) || end_string(&o->key, ev, 1))
            return FAILED;
        if (with_old && put_key(&o->before_key.data, l, x->old_slots, &x->old_row, x->data_slots, &x->data_row))
            return FAILED;
        if (end_string(&o->before_key, ev, with_old)) return FAILED;
        if (op != OP_DELETE) {
            Buf *a = &o->after.data;
            if (put1(a, '{')) return FAILED;
            int first = 1;
            for (Py_ssize_t c = 0; c < l->ncols; c++) {
                Slot *s = &x->data_slots[c];
                if (!s->present) continue;
                /* a number or true/false as JSON text (see cdclake.spark.changelog._image_json); keys keep them bare */
                const char *value = x->data_row.p + s->at;
                int bare = s->len && *value != '"' && *value != 'n';
                if ((!first && put1(a, ',')) || put(a, l->name_json[c], l->name_json_len[c]) ||
                    (bare && put1(a, '"')) || put(a, value, s->len) || (bare && put1(a, '"')))
                    return FAILED;
                first = 0;
            }
            if (put1(a, '}')) return FAILED;
        }
        if (end_string(&o->after, ev, op != OP_DELETE)) return FAILED;
        Buf *pos = &o->position.data;
        if (has_commit) { /* TiCDC: the kind of change orders a commit's events (delete < update < insert) */
            if (put1(pos, op == OP_DELETE ? '1' : op == OP_UPDATE ? '2' : '3')) return FAILED;
        } else if (put_padded(pos, txn) || put1(pos, '/') || put_padded(pos, offset) || put1(pos, '/') ||
                   put_padded(pos, row)) {
            return FAILED;
        }
        if (end_string(&o->position, ev, 1)) return FAILED;
        o->events++;
        d = ws(d, e);
        if (with_old) q = ws(q, e);
        if (*d == ']') break;
        if (*d != ',') return LEFT;
        d = ws(d + 1, e);
        if (with_old) {
            if (*q != ',') return LEFT;
            q = ws(q + 1, e);
        }
    }
    if (with_old && *q != ']') return LEFT; /* more old rows than data rows */
    return HANDLED;
}

static PyObject *bytes_of(Buf *b) { return buf_finish(b); }

/* As cdclake.native.compiled.variable_array takes a column: (validity, offsets, data, null count), -1 for "count them". */
static PyObject *strings_of(Strings *s) {
    return Py_BuildValue("(NNNi)", bytes_of(&s->valid), bytes_of(&s->offsets), bytes_of(&s->data), -1);
}

static const char decode_doc[] =
    "decode(value_offsets, value_data, value_valid, record_offsets, n, layout_of, cache)\n\n"
    "The events of n records' values (an Arrow binary array's int32 offsets, data and validity bitmap or None;\n"
    "the records' int64 offsets), as the buffers of the changelog columns, and the records left to Python.";

static PyObject *decode(PyObject *self, PyObject *args) {
    Py_buffer value_offsets, value_data, record_offsets;
    PyObject *valid_obj, *layout_of, *cache;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "y*y*Oy*nOO!", &value_offsets, &value_data, &valid_obj, &record_offsets, &n,
                          &layout_of, &PyDict_Type, &cache))
        return NULL;
    PyObject *result = NULL;
    Py_buffer valid = {0};
    Out o;
    memset(&o, 0, sizeof o);
    Ctx x;
    memset(&x, 0, sizeof x);
    x.layout_of = layout_of;
    x.cache = cache;
    Buf left = {0};
    int32_t zero = 0;
    if (valid_obj != Py_None && PyObject_GetBuffer(valid_obj, &valid, PyBUF_SIMPLE)) goto done;
    if (value_offsets.len < (n + 1) * 4 || record_offsets.len < n * 8 ||
        (valid_obj != Py_None && valid.len * 8 < n)) {
        PyErr_SetString(PyExc_ValueError, "buffers shorter than n records");
        goto done;
    }
    if (put(&o.database.offsets, &zero, 4) || put(&o.table.offsets, &zero, 4) || put(&o.key.offsets, &zero, 4) ||
        put(&o.before_key.offsets, &zero, 4) || put(&o.after.offsets, &zero, 4) ||
        put(&o.position.offsets, &zero, 4))
        goto done;
    const int32_t *offsets = value_offsets.buf;
    const int64_t *record_offset = record_offsets.buf;
    const char *bytes = value_data.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        int rc = LEFT;
        int present = valid_obj == Py_None || (((const unsigned char *)valid.buf)[i >> 3] >> (i & 7) & 1);
        if (present && offsets[i + 1] > offsets[i] && offsets[i + 1] <= value_data.len) {
            Mark m;
            mark(&o, &m);
            rc = decode_one(&x, &o, bytes + offsets[i], bytes + offsets[i + 1], record_offset[i], (int32_t)i);
            if (rc == FAILED) goto done;
            if (rc == LEFT) rewind_to(&o, &m);
        }
        if (rc == LEFT) {
            int32_t at = (int32_t)i;
            if (put(&left, &at, 4)) goto done;
        }
    }
    result = Py_BuildValue("(nNNNNNNNNNNNNNN)", o.events, bytes_of(&o.record), bytes_of(&o.seq), bytes_of(&o.op),
                           bytes_of(&o.layout), bytes_of(&o.commit_ts), bytes_of(&o.ts_ms), bytes_of(&o.ts_ms_valid),
                           strings_of(&o.database), strings_of(&o.table), strings_of(&o.key),
                           strings_of(&o.before_key), strings_of(&o.after), strings_of(&o.position), bytes_of(&left));
done:
    PyBuffer_Release(&value_offsets);
    PyBuffer_Release(&value_data);
    PyBuffer_Release(&record_offsets);
    if (valid.obj) PyBuffer_Release(&valid);
    out_free(&o);
    buf_free(&left);
    free(x.data_slots);
    free(x.old_slots);
    buf_free(&x.data_row);
    buf_free(&x.old_row);
    buf_free(&x.scratch);
    buf_free(&x.seen_types);
    buf_free(&x.seen_pk);
    buf_free(&x.seen_codes);
    free(x.data_tape.tokens);
    free(x.old_tape.tokens);
    Py_XDECREF(x.last_key);
    return result;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS, decode_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_canal",
                                    "Canal-JSON row messages into changelog columns (see canal_json.py).", -1,
                                    methods};

PyMODINIT_FUNC PyInit__canal(void) {
    PyObject *json = PyImport_ImportModule("msgspec.json");
    if (!json) return NULL;
    PyObject *encoder = PyObject_CallMethod(json, "Encoder", NULL);
    Py_DECREF(json);
    if (!encoder) return NULL;
    float_encode = PyObject_GetAttrString(encoder, "encode");
    Py_DECREF(encoder);
    if (!float_encode) return NULL;
    PyObject *compiled = PyImport_ImportModule("cdclake.native.compiled");
    if (!compiled) return NULL;
    PyObject *table = PyObject_CallMethod(compiled, "powers_of_five", "ii", POW5_MIN, POW5_MAX);
    Py_DECREF(compiled);
    if (!table) return NULL;
    if (!PyBytes_Check(table) || PyBytes_GET_SIZE(table) != (POW5_MAX - POW5_MIN + 1) * (Py_ssize_t)sizeof(Power)) {
        Py_DECREF(table);
        PyErr_SetString(PyExc_ImportError, "cdclake.native.compiled.powers_of_five: not a table of this build's shape");
        return NULL;
    }
    pow5_table = table;
    pow5 = (const Power *)PyBytes_AS_STRING(table);
    return PyModule_Create(&module);
}

/* What cdclake's C extensions share: a byte buffer that becomes a bytes object without a copy, and a JSON
 * scanner that checks what it skips as msgspec would read it (UTF-8, escapes, numbers, nesting). Static, so each
 * extension compiles its own copy and the hot helpers inline; setup.py lists this header in every extension's
 * depends, so a change here rebuilds them all. */
#ifndef CDCLAKE_NATIVE_COMMON_H
#define CDCLAKE_NATIVE_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Helpers a given extension may not call. */
#define SHARED static __attribute__((unused))

/* A byte buffer growing in place inside a bytes object, so that its contents reach Python (and Arrow) without
 * a copy. Zero-initialised it is empty and owns nothing; buf_finish hands its bytes over, buf_free drops them. */
typedef struct {
    PyObject *obj;
    char *p;
    Py_ssize_t n, cap;
} Buf;

/* Room for need more bytes: the capacity doubles (from 1024), or grows to just hold them if that is more. */
SHARED int grow(Buf *b, Py_ssize_t need) {
    if (b->n + need <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? 2 * b->cap : 1024;
    if (cap < b->n + need) cap = b->n + need;
    if (b->obj ? _PyBytes_Resize(&b->obj, cap) < 0 : !(b->obj = PyBytes_FromStringAndSize(NULL, cap))) {
        b->p = NULL;
        b->n = b->cap = 0;
        return -1;
    }
    b->p = PyBytes_AS_STRING(b->obj);
    b->cap = cap;
    return 0;
}

static inline int put(Buf *b, const void *s, Py_ssize_t n) {
    if (grow(b, n)) return -1;
    memcpy(b->p + b->n, s, (size_t)n);
    b->n += n;
    return 0;
}

static inline int put1(Buf *b, char c) { return put(b, &c, 1); }

/* Sets or clears bit i of a bitmap (an Arrow validity buffer), which grows with zero bytes to hold it. */
SHARED int set_bit(Buf *bits, Py_ssize_t i, int on) {
    Py_ssize_t byte = i >> 3;
    if (byte >= bits->n) {
        if (grow(bits, byte + 1 - bits->n)) return -1;
        memset(bits->p + bits->n, 0, (size_t)(byte + 1 - bits->n));
        bits->n = byte + 1;
    }
    if (on)
        bits->p[byte] |= (char)(1 << (i & 7));
    else
        bits->p[byte] &= (char)~(1 << (i & 7));
    return 0;
}

/* The bytes object holding exactly the buffer's contents (empty if it never grew); the Buf is left empty. */
SHARED PyObject *buf_finish(Buf *b) {
    PyObject *obj = b->obj;
    Py_ssize_t n = b->n;
    *b = (Buf){0};
    if (!obj) return PyBytes_FromStringAndSize("", 0);
    if (_PyBytes_Resize(&obj, n) < 0) return NULL;
    return obj;
}

static inline void buf_free(Buf *b) {
    Py_CLEAR(b->obj);
    *b = (Buf){0};
}

/* ------------------------------------------------------------------------------------------- JSON scanning */

enum { ESCAPED = 1, HIGH = 2, UTF8_OK = 4 }; /* what a scanned string holds; UTF8_OK: HIGH, and checked */
#define MAX_DEPTH 64

static inline const char *ws(const char *p, const char *e) {
    if (p < e && (unsigned char)*p > ' ') return p; /* producers write compact JSON: as a rule, no space at all */
    while (p < e && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

/* p at '"': the content's span and what it holds; NULL for an unterminated string or a raw control character. */
SHARED const char *scan_string(const char *p, const char *e, const char **s, Py_ssize_t *n, int *flags) {
    const char *start = ++p;
    int f = 0;
    for (;;) {
#if defined(__SSE2__)
        /* Sixteen bytes at a time up to the first quote, backslash or control character: row values are
         * long runs of plain text. */
        const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
        while (e - p >= 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)p);
            unsigned high = (unsigned)_mm_movemask_epi8(v); /* bytes >= 0x80 (negative as signed) */
            unsigned special = (unsigned)_mm_movemask_epi8(_mm_or_si128(
                _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)), _mm_cmplt_epi8(v, space)));
            special &= ~high;
            if (!special) {
                if (high) f |= HIGH;
                p += 16;
                continue;
            }
            int at = __builtin_ctz(special);
            if (high & ((1u << at) - 1)) f |= HIGH;
            p += at;
            break;
        }
#endif
        if (p >= e) return NULL;
        unsigned char c = (unsigned char)*p;
        if (c == '"') {
            *s = start;
            *n = p - start;
            *flags = f;
            return p + 1;
        }
        if (c == '\\') {
            f |= ESCAPED;
            if (p + 1 >= e) return NULL;
            p += 2;
            continue;
        }
        if (c < 0x20) return NULL;
        if (c >= 0x80) f |= HIGH;
        p++;
    }
}

static inline int is_digit(char c) { return c >= '0' && c <= '9'; }

/* p past a run of digits, eight at a time while they last: TiCDC writes a double's every digit, up to ~330. */
static inline const char *skip_digits(const char *p, const char *e) {
    uint64_t w;
    while (e - p >= 8) {
        memcpy(&w, p, 8);
        /* every byte 0x30..0x39: its high nibble is 3, and adding 6 keeps it 3 */
        if ((w & 0xF0F0F0F0F0F0F0F0ull) != 0x3030303030303030ull ||
            ((w + 0x0606060606060606ull) & 0xF0F0F0F0F0F0F0F0ull) != 0x3030303030303030ull)
            break;
        p += 8;
    }
    while (p < e && is_digit(*p)) p++;
    return p;
}

/* A JSON number; *integral: no fraction and no exponent. */
SHARED const char *scan_number(const char *p, const char *e, int *integral) {
    *integral = 1;
    if (p < e && *p == '-') p++;
    if (p >= e) return NULL;
    if (*p == '0')
        p++;
    else if (is_digit(*p))
        p = skip_digits(p, e);
    else
        return NULL;
    if (p < e && *p == '.') {
        *integral = 0;
        p++;
        if (p >= e || !is_digit(*p)) return NULL;
        p = skip_digits(p, e);
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        *integral = 0;
        p++;
        if (p < e && (*p == '+' || *p == '-')) p++;
        if (p >= e || !is_digit(*p)) return NULL;
        while (p < e && is_digit(*p)) p++;
    }
    return p;
}

SHARED int utf8_valid(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        uint64_t word;
        if (n - i >= 8 && (memcpy(&word, s + i, 8), !(word & 0x8080808080808080ull))) { /* eight ASCII bytes */
            i += 8;
            continue;
        }
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int len;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (i + len > n) return 0;
        for (int j = 1; j < len; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += len;
    }
    return 1;
}

/* The strings of a message's data (or old) rows as skip_value found them, in order, so that reading the rows
 * takes each string from here instead of scanning and checking it a second time. */
typedef struct {
    const char *at; /* the opening quote */
    const char *s;
    Py_ssize_t n;
    int flags;
} Token;

typedef struct {
    Token *tokens;
    Py_ssize_t n, cap, next;
} Tape;

SHARED void tape_add(Tape *t, const char *at, const char *s, Py_ssize_t n, int flags) {
    if (t->n == t->cap) {
        Py_ssize_t cap = t->cap ? t->cap * 2 : 64;
        Token *grown = realloc(t->tokens, (size_t)cap * sizeof(Token));
        if (!grown) return; /* the reader scans this string itself, and finds the tape again at the next */
        t->tokens = grown;
        t->cap = cap;
    }
    t->tokens[t->n++] = (Token){at, s, n, flags};
}

SHARED int hex4(const char *s, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (uint32_t)(c - 'A' + 10);
        else
            return 0;
    }
    *out = v;
    return 1;
}

/* Whether msgspec reads a string's escapes (what unescape reads without leaving it): skip_value checks the
 * strings of members nobody reads with it, so that a message msgspec refuses is never decoded here. */
SHARED int escapes_valid(const char *s, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] != '\\') continue;
        if (++i >= n) return 0;
        if (strchr("\"\\/bfnrt", s[i]) && s[i]) continue;
        uint32_t cp, low;
        if (s[i] != 'u' || i + 4 >= n || !hex4(s + i + 1, &cp) || (cp >= 0xDC00 && cp <= 0xDFFF)) return 0;
        i += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (i + 6 >= n || s[i + 1] != '\\' || s[i + 2] != 'u' || !hex4(s + i + 3, &low) || low < 0xDC00 ||
                low > 0xDFFF)
                return 0;
            i += 6;
        }
    }
    return 1;
}

/* Skips one JSON value, checking it as msgspec would (strings must be valid UTF-8); NULL if it is not. Its
 * strings go to tape unless that is NULL. */
SHARED const char *skip_value(const char *p, const char *e, int depth, Tape *tape) {
    const char *s, *at = p;
    Py_ssize_t n;
    int flags, integral;
    if (p >= e || depth > MAX_DEPTH) return NULL;
    switch (*p) {
    case '"':
        p = scan_string(p, e, &s, &n, &flags);
        if (p && (flags & HIGH)) {
            if (!utf8_valid((const unsigned char *)s, n)) return NULL;
            flags |= UTF8_OK;
        }
        if (p && (flags & ESCAPED) && !escapes_valid(s, n)) return NULL;
        if (p && tape) tape_add(tape, at, s, n, flags);
        return p;
    case '{':
        p = ws(p + 1, e);
        if (p < e && *p == '}') return p + 1;
        for (;;) {
            if (p >= e || *p != '"') return NULL;
            p = skip_value(p, e, depth + 1, tape);
            if (!p) return NULL;
            p = ws(p, e);
            if (p >= e || *p != ':') return NULL;
            p = skip_value(ws(p + 1, e), e, depth + 1, tape);
            if (!p) return NULL;
            p = ws(p, e);
            if (p < e && *p == '}') return p + 1;
            if (p >= e || *p != ',') return NULL;
            p = ws(p + 1, e);
        }
    case '[':
        p = ws(p + 1, e);
        if (p < e && *p == ']') return p + 1;
        for (;;) {
            p = skip_value(p, e, depth + 1, tape);
            if (!p) return NULL;
            p = ws(p, e);
            if (p < e && *p == ']') return p + 1;
            if (p >= e || *p != ',') return NULL;
            p = ws(p + 1, e);
        }
    case 't':
        return e - p >= 4 && !memcmp(p, "true", 4) ? p + 4 : NULL;
    case 'f':
        return e - p >= 5 && !memcmp(p, "false", 5) ? p + 5 : NULL;
    case 'n':
        return e - p >= 4 && !memcmp(p, "null", 4) ? p + 4 : NULL;
    default:
        return scan_number(p, e, &integral);
    }
}

static inline int is_null(const char *p, const char *e) { return e - p >= 4 && !memcmp(p, "null", 4); }

static const char HEX[] __attribute__((unused)) = "0123456789abcdef";

/* Text as a JSON string, escaped as msgspec escapes it. */
SHARED int put_json_string(Buf *b, const char *s, Py_ssize_t n) {
    if (grow(b, n + 2)) return -1;
    b->p[b->n++] = '"';
    Py_ssize_t run = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        if (put(b, s + run, i - run)) return -1;
        run = i + 1;
        char esc[6] = {'\\', 0, 0, 0, 0, 0};
        int len = 2;
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        default:
            esc[1] = 'u';
            esc[2] = '0';
            esc[3] = '0';
            esc[4] = HEX[c >> 4];
            esc[5] = HEX[c & 15];
            len = 6;
        }
        if (put(b, esc, len)) return -1;
    }
    if (put(b, s + run, n - run)) return -1;
    return put1(b, '"');
}

#endif

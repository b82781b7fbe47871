/* Row images into the changelog's form, for every format the Python decoders read (the compiled Canal path
 * writes its images so itself): the compiled twin of cdclake.spark.changelog._image_texts, which the tests hold
 * it to byte for byte. */
#include "common.h"

/* A row image as msgspec writes it (a compact JSON object) made into the changelog's form, where every member's
 * value is a string or null: a number, true or false goes between quotes as it is written, an object or array
 * becomes a string of its JSON text. _canal.c writes its `after` images so itself; this does it for the images of
 * every format the Python decoders read, faster than a Python pass over the values (see changelog._image_json;
 * its Python twin, _image_texts, is the tests' reference). */
static PyObject *image_texts(PyObject *module, PyObject *arg) {
    (void)module;
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "image_texts takes the bytes of a JSON object");
        return NULL;
    }
    const char *p = PyBytes_AS_STRING(arg), *e = p + PyBytes_GET_SIZE(arg), *s;
    Py_ssize_t n;
    int flags;
    Buf out = {0};
    PyObject *result = NULL;
    if (grow(&out, 2 * (e - p) + 2)) goto done; /* as a rule twice as long at most: one allocation */
    if (p >= e || *p != '{' || put1(&out, '{')) goto bad;
    p++;
    if (p < e && *p == '}') {
        p++;
    } else {
        for (;;) {
            const char *at = p, *end;
            if (p >= e || *p != '"' || !(p = scan_string(p, e, &s, &n, &flags)) || p >= e || *p != ':') goto bad;
            if (put(&out, at, p + 1 - at)) goto done;
            at = ++p;
            if (p >= e) goto bad;
            if (*p == '"') {
                if (!(end = scan_string(p, e, &s, &n, &flags)) || put(&out, at, end - at)) goto bad;
            } else if (is_null(p, e)) {
                end = p + 4;
                if (put(&out, at, 4)) goto done;
            } else { /* a number, true, false, an object or an array: its text as a JSON string */
                if (!(end = skip_value(p, e, 0, NULL))) goto bad;
                if (put_json_string(&out, p, end - p)) goto done;
            }
            p = end;
            if (p < e && *p == '}') {
                p++;
                break;
            }
            if (p >= e || *p != ',' || put1(&out, ',')) goto bad;
            p++;
        }
    }
    if (p != e || put1(&out, '}')) goto bad;
    result = buf_finish(&out);
    goto done;
bad:
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "image_texts: not a compact JSON object");
done:
    buf_free(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"image_texts", image_texts, METH_O,
     "image_texts(image: bytes) -> bytes\n\nA compact JSON object with every value a string or null: numbers, "
     "true and false quoted, objects and arrays as their JSON text."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_images",
                                    "Row images as the changelog writes them: every value a string or null.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__images(void) { return PyModule_Create(&module); }

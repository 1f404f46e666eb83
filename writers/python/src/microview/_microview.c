/* _microview: the Python binding of libmicroview (segment, counter, gauge and histogram handles).
 *
 * The format is implemented once, in libmicroview; this module only converts arguments.
 * Handle methods are METH_FASTCALL builtins that call libmicroview's atomic updates, so they
 * are safe from many threads (with or without the GIL) and cost one C call.
 * Every handle holds a reference to its Segment, which keeps the mapping alive.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <microview.h>

#define MAX_LABELS  16
#define MAX_BUCKETS 160

static PyObject *mv_Error; /* microview._microview.Error(code, name, detail) */

typedef struct {
    PyObject_HEAD mv_segment *seg;
} SegmentObject;

typedef struct {
    PyObject_HEAD PyObject *segment;
    mv_counter c;
    uint64_t frac; /* double bits: fractional increments not yet carried into the segment */
} CounterObject;

typedef struct {
    PyObject_HEAD PyObject *segment;
    mv_gauge g;
} GaugeObject;

typedef struct {
    PyObject_HEAD PyObject *segment;
    mv_histogram *h;
} HistogramObject;

static PyTypeObject SegmentType, CounterType, GaugeType, HistogramType;

static const char *code_name(int rc)
{
    switch (rc) {
    case MV_ERR_NOENV:
        return "noenv";
    case MV_ERR_NOSEGMENT:
        return "nosegment";
    case MV_ERR_FORMAT:
        return "format";
    case MV_ERR_FULL:
        return "full";
    case MV_ERR_NAME:
        return "name";
    case MV_ERR_INVALID:
        return "invalid";
    case MV_ERR_CONFLICT:
        return "conflict";
    case MV_ERR_BUSY:
        return "busy";
    case MV_ERR_NOMEM:
        return "nomem";
    case MV_ERR_IO:
        return "io";
    default:
        return "unknown";
    }
}

static PyObject *raise_mv(int rc)
{
    PyObject *args = Py_BuildValue("(iss)", rc, code_name(rc), mv_errdetail());
    if (args) {
        PyErr_SetObject(mv_Error, args);
        Py_DECREF(args);
    }
    return NULL;
}

/* ---- Segment ---------------------------------------------------------------- */

static int Segment_init(SegmentObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"path", NULL};
    PyObject *path = Py_None, *bytes = NULL;
    int rc;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:Segment", kwlist, &path))
        return -1;
    if (self->seg) {
        PyErr_SetString(PyExc_RuntimeError, "Segment is already open");
        return -1;
    }
    if (path != Py_None && !PyUnicode_FSConverter(path, &bytes))
        return -1;
    Py_BEGIN_ALLOW_THREADS;
    rc = bytes ? mv_open(PyBytes_AS_STRING(bytes), &self->seg) : mv_open_from_env(&self->seg);
    Py_END_ALLOW_THREADS;
    Py_XDECREF(bytes);
    if (rc != MV_OK) {
        raise_mv(rc);
        return -1;
    }
    return 0;
}

static void Segment_dealloc(SegmentObject *self)
{
    mv_close(self->seg);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Converts a sequence of (key, value) pairs; the strings stay owned by `labels`. */
static int get_labels(PyObject *labels, mv_label *out, size_t *n)
{
    PyObject *fast = PySequence_Fast(labels, "labels must be a sequence of (key, value) pairs");
    if (!fast)
        return -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
    if (len > MAX_LABELS + 1) /* one past the limit reaches libmicroview, which names it */
        len = MAX_LABELS + 1;
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
            !(out[i].key = PyUnicode_AsUTF8(PyTuple_GET_ITEM(pair, 0))) ||
            !(out[i].value = PyUnicode_AsUTF8(PyTuple_GET_ITEM(pair, 1)))) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "each label is a (str, str) tuple");
            Py_DECREF(fast);
            return -1;
        }
    }
    *n = (size_t)len;
    Py_DECREF(fast); /* items are borrowed from `labels`, which the caller holds */
    return 0;
}

static PyObject *new_handle(PyTypeObject *type, SegmentObject *seg)
{
    PyObject *o = type->tp_alloc(type, 0);
    if (o) {
        Py_INCREF(seg);
        ((CounterObject *)o)->segment = (PyObject *)seg; /* same layout in all three */
    }
    return o;
}

/* The handle type to create: `cls` if it is a subclass of `base`, else `base`. */
static PyTypeObject *handle_type(PyObject *cls, PyTypeObject *base)
{
    if (cls == Py_None)
        return base;
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, base)) {
        PyErr_Format(PyExc_TypeError, "cls must be a subclass of %s", base->tp_name);
        return NULL;
    }
    return (PyTypeObject *)cls;
}

/* segment.register(kind, name, help, unit, labels, bounds=None, cls=None) -> handle
 * The GIL is released while libmicroview registers (it may wait up to 2 s for another
 * process's registration lock); the strings stay alive in `args` meanwhile. */
static PyObject *register_impl(SegmentObject *self, const char *kind, const char *name,
                               const char *help, const char *unit, PyObject *labels,
                               PyObject *bounds, PyObject *cls)
{
    PyTypeObject *t;
    mv_label lv[MAX_LABELS + 1];
    size_t nl = 0;
    double bv[MAX_BUCKETS + 1];
    size_t nb = 0;
    int rc;
    if (get_labels(labels, lv, &nl))
        return NULL;
    if (bounds != Py_None) {
        PyObject *fast = PySequence_Fast(bounds, "bounds must be a sequence of floats");
        if (!fast)
            return NULL;
        Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
        nb = len > MAX_BUCKETS + 1 ? MAX_BUCKETS + 1 : (size_t)len;
        for (size_t i = 0; i < nb; i++) {
            bv[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(fast, (Py_ssize_t)i));
            if (bv[i] == -1.0 && PyErr_Occurred()) {
                Py_DECREF(fast);
                return NULL;
            }
        }
        Py_DECREF(fast);
    }
    if (strcmp(kind, "counter") == 0) {
        if (!(t = handle_type(cls, &CounterType)))
            return NULL;
        mv_counter c;
        Py_BEGIN_ALLOW_THREADS;
        rc = mv_counter_register(self->seg, name, help, unit, lv, nl, &c);
        Py_END_ALLOW_THREADS;
        if (rc != MV_OK)
            return raise_mv(rc);
        PyObject *o = new_handle(t, self);
        if (o)
            ((CounterObject *)o)->c = c;
        return o;
    }
    if (strcmp(kind, "gauge") == 0) {
        if (!(t = handle_type(cls, &GaugeType)))
            return NULL;
        mv_gauge g;
        Py_BEGIN_ALLOW_THREADS;
        rc = mv_gauge_register(self->seg, name, help, unit, lv, nl, &g);
        Py_END_ALLOW_THREADS;
        if (rc != MV_OK)
            return raise_mv(rc);
        PyObject *o = new_handle(t, self);
        if (o)
            ((GaugeObject *)o)->g = g;
        return o;
    }
    if (strcmp(kind, "histogram") == 0) {
        if (!(t = handle_type(cls, &HistogramType)))
            return NULL;
        mv_histogram *h;
        Py_BEGIN_ALLOW_THREADS;
        rc = mv_histogram_register(self->seg, name, help, unit, lv, nl, bv, nb, &h);
        Py_END_ALLOW_THREADS;
        if (rc != MV_OK)
            return raise_mv(rc);
        PyObject *o = new_handle(t, self);
        if (o)
            ((HistogramObject *)o)->h = h;
        return o;
    }
    PyErr_Format(PyExc_ValueError, "unknown metric kind %s", kind);
    return NULL;
}

static PyObject *Segment_register(SegmentObject *self, PyObject *args)
{
    const char *kind, *name, *help, *unit;
    PyObject *labels, *bounds = Py_None, *cls = Py_None;
    if (!PyArg_ParseTuple(args, "szzzO|OO:register", &kind, &name, &help, &unit, &labels, &bounds,
                          &cls))
        return NULL;
    /* A private tuple: its strings cannot go away while the GIL is released. */
    PyObject *lt = PySequence_Tuple(labels);
    if (!lt)
        return NULL;
    PyObject *r = register_impl(self, kind, name, help, unit, lt, bounds, cls);
    Py_DECREF(lt);
    return r;
}

static PyObject *Segment_heartbeat(SegmentObject *self, PyObject *unused)
{
    mv_heartbeat(self->seg);
    Py_RETURN_NONE;
}

static PyObject *Segment_set_shards(SegmentObject *self, PyObject *arg)
{
    unsigned long n = PyLong_AsUnsignedLong(arg);
    if (n == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    int rc = mv_set_shards(self->seg, n > 64 ? 0u : (unsigned)n);
    if (rc != MV_OK)
        return raise_mv(rc);
    Py_RETURN_NONE;
}

static PyObject *Segment_get_path(SegmentObject *self, void *c)
{
    if (!self->seg)
        Py_RETURN_NONE;
    return PyUnicode_DecodeFSDefault(mv_segment_path(self->seg));
}

static PyObject *Segment_get_size(SegmentObject *self, void *c)
{
    return PyLong_FromSize_t(mv_segment_size(self->seg));
}

static PyMethodDef Segment_methods[] = {{"register", (PyCFunction)Segment_register, METH_VARARGS,
                                         "register(kind, name, help, unit, labels, bounds=None, "
                                         "cls=None): registers (or finds) a series and "
                                         "returns its handle; raises Error on failure."},
                                        {"heartbeat", (PyCFunction)Segment_heartbeat, METH_NOARGS,
                                         "Stores the current time as the writer heartbeat."},
                                        {"set_shards", (PyCFunction)Segment_set_shards, METH_O,
                                         "set_shards(n): series registered after this keep n "
                                         "per-thread copies of their value (1, or a power of "
                                         "two up to 64), summed by readers; raises Error "
                                         "otherwise."},
                                        {NULL}};

static PyGetSetDef Segment_getset[] = {
    {"path", (getter)Segment_get_path, NULL, "segment file path", NULL},
    {"size", (getter)Segment_get_size, NULL, "segment size in bytes", NULL},
    {NULL}};

/* ---- Handles ------------------------------------------------------------------ */

static void Handle_dealloc(CounterObject *self)
{
    Py_XDECREF(self->segment);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Adds a fractional amount: the fraction is kept in the handle (compare-and-swap, so
 * concurrent callers lose nothing) and whole units are carried into the segment. */
static void counter_add_fraction(CounterObject *self, double d)
{
    uint64_t old = __atomic_load_n(&self->frac, __ATOMIC_RELAXED), nw;
    double whole;
    do {
        double f;
        memcpy(&f, &old, sizeof f);
        f += d;
        whole = floor(f);
        f -= whole;
        memcpy(&nw, &f, sizeof nw);
    } while (
        !__atomic_compare_exchange_n(&self->frac, &old, nw, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    if (whole > 0)
        mv_counter_add(self->c, (uint64_t)whole);
}

static PyObject *Counter_inc(CounterObject *self, PyObject *const *args, Py_ssize_t n)
{
    if (n > 1) {
        PyErr_SetString(PyExc_TypeError, "inc(amount=1)");
        return NULL;
    }
    if (n == 0) {
        mv_counter_inc(self->c);
        Py_RETURN_NONE;
    }
    PyObject *o = args[0];
    if (PyLong_Check(o)) {
        unsigned long long v = PyLong_AsUnsignedLongLong(o);
        if (v == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError,
                            "Counters can only be incremented by non-negative amounts.");
            return NULL;
        }
        mv_counter_add(self->c, v);
        Py_RETURN_NONE;
    }
    double d = PyFloat_AsDouble(o);
    if (d == -1.0 && PyErr_Occurred())
        return NULL;
    if (!(d >= 0) || isinf(d)) {
        PyErr_SetString(PyExc_ValueError,
                        "Counters can only be incremented by non-negative finite amounts.");
        return NULL;
    }
    if (d == floor(d) && d < 18446744073709551616.0)
        mv_counter_add(self->c, (uint64_t)d);
    else
        counter_add_fraction(self, d);
    Py_RETURN_NONE;
}

static PyObject *Counter_get(CounterObject *self, PyObject *unused)
{
    uint64_t v = mv_counter_value(self->c);
    uint64_t bits = __atomic_load_n(&self->frac, __ATOMIC_RELAXED);
    double f;
    memcpy(&f, &bits, sizeof f);
    if (f == 0)
        return PyLong_FromUnsignedLongLong(v);
    return PyFloat_FromDouble((double)v + f);
}

static int get_double(PyObject *o, double *out)
{
    *out = PyFloat_AsDouble(o);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

static PyObject *Gauge_set(GaugeObject *self, PyObject *const *args, Py_ssize_t n)
{
    double v;
    if (n != 1) {
        PyErr_SetString(PyExc_TypeError, "set(value)");
        return NULL;
    }
    if (get_double(args[0], &v))
        return NULL;
    mv_gauge_set(self->g, v);
    Py_RETURN_NONE;
}

static PyObject *gauge_add(GaugeObject *self, PyObject *const *args, Py_ssize_t n, double sign)
{
    double v = 1;
    if (n > 1) {
        PyErr_SetString(PyExc_TypeError, "inc(amount=1) / dec(amount=1)");
        return NULL;
    }
    if (n == 1 && get_double(args[0], &v))
        return NULL;
    mv_gauge_add(self->g, sign * v);
    Py_RETURN_NONE;
}

static PyObject *Gauge_inc(GaugeObject *self, PyObject *const *args, Py_ssize_t n)
{
    return gauge_add(self, args, n, 1.0);
}

static PyObject *Gauge_dec(GaugeObject *self, PyObject *const *args, Py_ssize_t n)
{
    return gauge_add(self, args, n, -1.0);
}

static PyObject *Gauge_get(GaugeObject *self, PyObject *unused)
{
    return PyFloat_FromDouble(mv_gauge_value(self->g));
}

static PyObject *Histogram_observe(HistogramObject *self, PyObject *const *args, Py_ssize_t n)
{
    double v;
    if (n != 1) {
        PyErr_SetString(PyExc_TypeError, "observe(value)");
        return NULL;
    }
    if (get_double(args[0], &v))
        return NULL;
    mv_histogram_observe(self->h, v);
    Py_RETURN_NONE;
}

static PyMethodDef Counter_methods[] = {
    {"inc", (PyCFunction)(void (*)(void))Counter_inc, METH_FASTCALL,
     "inc(amount=1): adds a non-negative amount (one atomic add; fractions are carried "
     "in the handle and reach the segment as whole units)."},
    {"get", (PyCFunction)Counter_get, METH_NOARGS,
     "Reads the counter: an int, or a float while a fraction is pending."},
    {NULL}};

static PyMethodDef Gauge_methods[] = {
    {"set", (PyCFunction)(void (*)(void))Gauge_set, METH_FASTCALL, "set(value): one store."},
    {"inc", (PyCFunction)(void (*)(void))Gauge_inc, METH_FASTCALL, "inc(amount=1)"},
    {"dec", (PyCFunction)(void (*)(void))Gauge_dec, METH_FASTCALL, "dec(amount=1)"},
    {"get", (PyCFunction)Gauge_get, METH_NOARGS, "Reads the gauge."},
    {NULL}};

static PyMethodDef Histogram_methods[] = {
    {"observe", (PyCFunction)(void (*)(void))Histogram_observe, METH_FASTCALL,
     "observe(value): records one observation (NaN is ignored)."},
    {NULL}};

#define HANDLE_TYPE(T, pyname, methods, doc)                                                       \
    static PyTypeObject T = {                                                                      \
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = "microview._microview." pyname,                   \
        .tp_basicsize = sizeof(CounterObject),                                                     \
        .tp_dealloc = (destructor)Handle_dealloc,                                                  \
        .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,                                      \
        .tp_doc = doc,                                                                             \
        .tp_methods = methods,                                                                     \
    }

HANDLE_TYPE(CounterType, "CounterHandle", Counter_methods, "A registered counter series.");
HANDLE_TYPE(GaugeType, "GaugeHandle", Gauge_methods, "A registered gauge series.");
HANDLE_TYPE(HistogramType, "HistogramHandle", Histogram_methods, "A registered histogram series.");

static PyTypeObject SegmentType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "microview._microview.Segment",
    .tp_basicsize = sizeof(SegmentObject),
    .tp_dealloc = (destructor)Segment_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Segment(path=None): maps a MicroView segment ($MICROVIEW_SEGMENT when path is "
              "None), formatting it if it is all zeros. Unmapped when the last handle is gone.",
    .tp_methods = Segment_methods,
    .tp_getset = Segment_getset,
    .tp_init = (initproc)Segment_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "microview._microview",
    .m_doc = "Binding of libmicroview; use the microview package instead.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__microview(void);

PyMODINIT_FUNC PyInit__microview(void)
{
    PyTypeObject *types[] = {&SegmentType, &CounterType, &GaugeType, &HistogramType};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (PyType_Ready(types[i]) < 0)
            return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    mv_Error = PyErr_NewExceptionWithDoc("microview._microview.Error",
                                         "A libmicroview failure: args are (code, kind, detail).",
                                         NULL, NULL);
    if (!mv_Error || PyModule_AddObject(m, "Error", mv_Error) < 0)
        goto fail;
    Py_INCREF(mv_Error);
    Py_INCREF(&SegmentType);
    if (PyModule_AddObject(m, "Segment", (PyObject *)&SegmentType) < 0)
        goto fail;
    for (size_t i = 1; i < sizeof types / sizeof types[0]; i++) {
        Py_INCREF(types[i]);
        if (PyModule_AddObject(m, types[i]->tp_name + strlen("microview._microview."),
                               (PyObject *)types[i]) < 0)
            goto fail;
    }
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}

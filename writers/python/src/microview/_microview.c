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

/* What every handle starts with: its Segment (NULL while not attached: a labelled parent
 * metric, whose updates raise prometheus_client's ValueError), and, for a parent metric, the
 * children dict (label value tuple -> child) and label names behind the fast labels(). */
#define HANDLE_HEAD                                                                                \
    PyObject_HEAD PyObject *segment;                                                               \
    PyObject *children;                                                                            \
    PyObject *labelnames

typedef struct {
    HANDLE_HEAD;
} HandleObject;

typedef struct {
    HANDLE_HEAD;
    mv_counter c;
    uint64_t frac; /* double bits: fractional increments not yet carried into the segment */
} CounterObject;

typedef struct {
    HANDLE_HEAD;
    mv_gauge g;
} GaugeObject;

typedef struct {
    HANDLE_HEAD;
    mv_counter_f c;
} FCounterObject;

typedef struct {
    HANDLE_HEAD;
    mv_histogram *h;
} HistogramObject;

static PyTypeObject SegmentType, CounterType, FCounterType, GaugeType, HistogramType;
static PyObject *exemplar_check; /* set_exemplar_check(fn): validates an exemplar= argument */

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
        ((HandleObject *)o)->segment = (PyObject *)seg; /* the first field of every handle */
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
    if (strcmp(kind, "counter_f") == 0) {
        if (!(t = handle_type(cls, &FCounterType)))
            return NULL;
        mv_counter_f c;
        Py_BEGIN_ALLOW_THREADS;
        rc = mv_counter_f_register(self->seg, name, help, unit, lv, nl, &c);
        Py_END_ALLOW_THREADS;
        if (rc != MV_OK)
            return raise_mv(rc);
        PyObject *o = new_handle(t, self);
        if (o)
            ((FCounterObject *)o)->c = c;
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

/* segment.delete(name, labels) -> bool (docs/segment-format.md section 6.6). */
static PyObject *Segment_delete(SegmentObject *self, PyObject *args)
{
    const char *name;
    PyObject *labels;
    mv_label lv[MAX_LABELS + 1];
    size_t nl = 0;
    int rc;
    if (!PyArg_ParseTuple(args, "sO:delete", &name, &labels))
        return NULL;
    PyObject *lt = PySequence_Tuple(labels);
    if (!lt)
        return NULL;
    if (get_labels(lt, lv, &nl)) {
        Py_DECREF(lt);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS;
    rc = mv_delete(self->seg, name, lv, nl);
    Py_END_ALLOW_THREADS;
    Py_DECREF(lt);
    if (rc < 0)
        return raise_mv(rc);
    return PyBool_FromLong(rc);
}

static PyObject *Segment_usage(SegmentObject *self, PyObject *unused)
{
    mv_usage u;
    if (mv_segment_usage(self->seg, &u) != MV_OK)
        return raise_mv(MV_ERR_INVALID);
    return Py_BuildValue(
        "{s:K,s:I,s:I,s:I,s:I,s:I,s:d}", "segment_size", (unsigned long long)u.segment_size,
        "values_used", u.values_used, "values_size", u.values_size, "catalog_used", u.catalog_used,
        "catalog_size", u.catalog_size, "records", u.records, "fullness", u.fullness);
}

static PyMethodDef Segment_methods[] = {{"register", (PyCFunction)Segment_register, METH_VARARGS,
                                         "register(kind, name, help, unit, labels, bounds=None, "
                                         "cls=None): registers (or finds) a series and "
                                         "returns its handle; raises Error on failure."},
                                        {"usage", (PyCFunction)Segment_usage, METH_NOARGS,
                                         "usage() -> dict: segment_size, values_used, "
                                         "values_size, catalog_used, catalog_size, records, "
                                         "fullness (the larger used/size ratio, 0..1)."},
                                        {"delete", (PyCFunction)Segment_delete, METH_VARARGS,
                                         "delete(name, labels): appends the tombstone of the "
                                         "live series with this name and labels (in "
                                         "registration order); True if one was deleted."},
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

static void Handle_dealloc(HandleObject *self)
{
    Py_XDECREF(self->segment);
    Py_XDECREF(self->children);
    Py_XDECREF(self->labelnames);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* An update on a handle that is not attached to a series: a labelled parent metric. */
static PyObject *not_observable(PyObject *self)
{
    PyObject *t = PyObject_GetAttrString(self, "_type");
    if (t) {
        PyErr_Format(PyExc_ValueError, "%S metric is missing label values", t);
        Py_DECREF(t);
    }
    return NULL;
}

/* handle._attach(other): makes this handle update other's series (same handle type). */
static PyObject *Handle_attach(HandleObject *self, PyObject *other)
{
    PyTypeObject *base = Py_TYPE(self);
    while (base->tp_base && base->tp_base != &PyBaseObject_Type)
        base = base->tp_base;
    if (!PyObject_TypeCheck(other, base)) {
        PyErr_Format(PyExc_TypeError, "_attach needs a %s", base->tp_name);
        return NULL;
    }
    Py_ssize_t head = (Py_ssize_t)sizeof(HandleObject);
    memcpy((char *)self + head, (char *)other + head, (size_t)(base->tp_basicsize - head));
    Py_XINCREF(((HandleObject *)other)->segment);
    Py_XSETREF(self->segment, ((HandleObject *)other)->segment);
    Py_RETURN_NONE;
}

/* handle._family(children, labelnames): the dict and names labels() looks children up in. */
static PyObject *Handle_family(HandleObject *self, PyObject *args)
{
    PyObject *children, *names;
    if (!PyArg_ParseTuple(args, "O!O!:_family", &PyDict_Type, &children, &PyTuple_Type, &names))
        return NULL;
    Py_INCREF(children);
    Py_XSETREF(self->children, children);
    Py_INCREF(names);
    Py_XSETREF(self->labelnames, names);
    Py_RETURN_NONE;
}

/* labels(*values, **kw): the child for these label values. The fast path finds an existing
 * child in C (values given as str, positionally or by name); everything else (a new child,
 * conversions, every error) is the package's _labels_slow, which has prometheus_client's
 * rules. */
static PyObject *Handle_labels(HandleObject *self, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames)
{
    Py_ssize_t n = PyVectorcall_NARGS(nargsf), nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *key = NULL, *child;
    if (self->children && self->labelnames) {
        Py_ssize_t nl = PyTuple_GET_SIZE(self->labelnames);
        if (nkw == 0 && n == nl) {
            key = PyTuple_New(n);
            if (!key)
                return NULL;
            for (Py_ssize_t i = 0; i < n; i++) {
                Py_INCREF(args[i]);
                PyTuple_SET_ITEM(key, i, args[i]);
            }
        } else if (n == 0 && nkw == nl && nl > 0) {
            key = PyTuple_New(nl);
            if (!key)
                return NULL;
            for (Py_ssize_t i = 0; i < nl && key; i++) {
                PyObject *name = PyTuple_GET_ITEM(self->labelnames, i), *v = NULL;
                for (Py_ssize_t j = 0; j < nkw && !v; j++) {
                    PyObject *k = PyTuple_GET_ITEM(kwnames, j);
                    if (k == name || PyUnicode_Compare(k, name) == 0)
                        v = args[j];
                }
                if (PyErr_Occurred())
                    PyErr_Clear();
                if (!v || !PyUnicode_CheckExact(v))
                    Py_CLEAR(key); /* not the names, or not str: the slow path decides */
                else {
                    Py_INCREF(v);
                    PyTuple_SET_ITEM(key, i, v);
                }
            }
        }
    }
    if (key) {
        child = PyDict_GetItemWithError(self->children, key);
        Py_DECREF(key);
        if (child) {
            Py_INCREF(child);
            return child;
        }
        PyErr_Clear(); /* unhashable values: str() of them in the slow path */
    }
    PyObject *name = PyUnicode_FromString("_labels_slow");
    if (!name)
        return NULL;
    /* self, then the arguments: PY_VECTORCALL_ARGUMENTS_OFFSET is not promised here. */
    PyObject *stack[1 + 2 * MAX_LABELS + 2];
    Py_ssize_t total = n + nkw;
    if (total > 2 * MAX_LABELS + 1) {
        Py_DECREF(name);
        PyErr_SetString(PyExc_ValueError, "Incorrect label count");
        return NULL;
    }
    stack[0] = (PyObject *)self;
    for (Py_ssize_t i = 0; i < total; i++)
        stack[1 + i] = args[i];
    PyObject *r = PyObject_VectorcallMethod(name, stack, (size_t)(n + 1), kwnames);
    Py_DECREF(name);
    return r;
}

/* The one argument of an update method, positional or by keyword (`name`), and an optional
 * exemplar= (validated by the package's hook, then dropped: the segment cannot carry it).
 * *val stays NULL when the argument is absent. Keywords are the slow path. */
static int one_arg(PyObject *const *args, Py_ssize_t n, PyObject *kwnames, const char *name,
                   int exemplar_ok, PyObject **val)
{
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *ex = NULL;
    *val = n > 0 ? args[0] : NULL;
    if (n > (exemplar_ok ? 2 : 1))
        goto usage;
    if (n == 2)
        ex = args[1];
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i);
        if (PyUnicode_CompareWithASCIIString(k, name) == 0 && !*val)
            *val = args[n + i];
        else if (exemplar_ok && PyUnicode_CompareWithASCIIString(k, "exemplar") == 0 && !ex)
            ex = args[n + i];
        else
            goto usage;
    }
    if (ex && ex != Py_None && exemplar_check) {
        PyObject *r = PyObject_CallOneArg(exemplar_check, ex);
        if (!r)
            return -1;
        Py_DECREF(r);
    }
    return 0;
usage:
    PyErr_Format(PyExc_TypeError, "takes (%s%s)", name, exemplar_ok ? ", exemplar=None" : "");
    return -1;
}

static const char neg_msg[] = "Counters can only be incremented by non-negative amounts.";

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

static PyObject *Counter_inc(CounterObject *self, PyObject *const *args, Py_ssize_t n,
                             PyObject *kwnames)
{
    if (__builtin_expect(!self->c.slot, 0))
        return not_observable((PyObject *)self);
    PyObject *o;
    if (kwnames || n > 1) {
        if (one_arg(args, n, kwnames, "amount", 1, &o))
            return NULL;
    } else
        o = n ? args[0] : NULL;
    if (!o) {
        mv_counter_inc(self->c);
        Py_RETURN_NONE;
    }
    if (PyLong_Check(o)) { /* any u64 (the counter wraps, as in the spec) */
        unsigned long long v = PyLong_AsUnsignedLongLong(o);
        if (v == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, neg_msg);
            return NULL;
        }
        mv_counter_add(self->c, v);
        Py_RETURN_NONE;
    }
    double d = PyFloat_AsDouble(o);
    if (d == -1.0 && PyErr_Occurred())
        return NULL;
    if (!(d >= 0) || isinf(d)) {
        PyErr_SetString(PyExc_ValueError, neg_msg);
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
    if (!self->c.slot)
        return not_observable((PyObject *)self);
    uint64_t v = mv_counter_value(self->c);
    uint64_t bits = __atomic_load_n(&self->frac, __ATOMIC_RELAXED);
    double f;
    memcpy(&f, &bits, sizeof f);
    if (f == 0)
        return PyLong_FromUnsignedLongLong(v);
    return PyFloat_FromDouble((double)v + f);
}

/* A fractional counter (type 4): whole amounts are one atomic add, others a CAS on the
 * accumulator word. NaN, infinities and negative amounts are refused. */
static PyObject *FCounter_inc(FCounterObject *self, PyObject *const *args, Py_ssize_t n,
                              PyObject *kwnames)
{
    if (__builtin_expect(!self->c.slot, 0))
        return not_observable((PyObject *)self);
    PyObject *o;
    if (kwnames || n > 1) {
        if (one_arg(args, n, kwnames, "amount", 1, &o))
            return NULL;
    } else
        o = n ? args[0] : NULL;
    if (!o) {
        mv_counter_f_inc(self->c);
        Py_RETURN_NONE;
    }
    double d;
    if (PyFloat_CheckExact(o))
        d = PyFloat_AS_DOUBLE(o);
    else if (PyLong_CheckExact(o)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (!overflow && v >= 0) {
            __atomic_fetch_add(mv__word(self->c.slot), (uint64_t)v, __ATOMIC_RELAXED); /* 5.3 */
            Py_RETURN_NONE;
        }
        if (v == -1 && PyErr_Occurred())
            return NULL;
        d = PyLong_AsDouble(o);
        if (d == -1.0 && PyErr_Occurred())
            return NULL;
    } else {
        d = PyFloat_AsDouble(o);
        if (d == -1.0 && PyErr_Occurred())
            return NULL;
    }
    if (mv_counter_f_add(self->c, d) != MV_OK) { /* NaN or negative: nothing stored */
        PyErr_SetString(PyExc_ValueError, d != d ? "Counters can only be incremented by "
                                                   "non-negative amounts (not NaN)."
                                                 : neg_msg);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *FCounter_get(FCounterObject *self, PyObject *unused)
{
    if (!self->c.slot)
        return not_observable((PyObject *)self);
    return PyFloat_FromDouble(mv_counter_f_value(self->c));
}

static int get_double(PyObject *o, double *out)
{
    if (PyFloat_CheckExact(o)) {
        *out = PyFloat_AS_DOUBLE(o);
        return 0;
    }
    if (PyLong_CheckExact(o)) /* no float object made on the way */
        *out = PyLong_AsDouble(o);
    else
        *out = PyFloat_AsDouble(o);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

static PyObject *Gauge_set(GaugeObject *self, PyObject *const *args, Py_ssize_t n,
                           PyObject *kwnames)
{
    if (__builtin_expect(!self->g.slot, 0))
        return not_observable((PyObject *)self);
    double v;
    PyObject *o;
    if (kwnames || n != 1) {
        if (one_arg(args, n, kwnames, "value", 0, &o))
            return NULL;
        if (!o) {
            PyErr_SetString(PyExc_TypeError, "set(value)");
            return NULL;
        }
    } else
        o = args[0];
    if (get_double(o, &v))
        return NULL;
    mv_gauge_set(self->g, v);
    Py_RETURN_NONE;
}

static PyObject *gauge_add(GaugeObject *self, PyObject *const *args, Py_ssize_t n,
                           PyObject *kwnames, double sign)
{
    if (__builtin_expect(!self->g.slot, 0))
        return not_observable((PyObject *)self);
    double v = 1;
    PyObject *o;
    if (kwnames || n > 1) {
        if (one_arg(args, n, kwnames, "amount", 0, &o))
            return NULL;
    } else
        o = n ? args[0] : NULL;
    if (o && get_double(o, &v))
        return NULL;
    mv_gauge_add(self->g, sign * v);
    Py_RETURN_NONE;
}

static PyObject *Gauge_inc(GaugeObject *self, PyObject *const *args, Py_ssize_t n,
                           PyObject *kwnames)
{
    return gauge_add(self, args, n, kwnames, 1.0);
}

static PyObject *Gauge_dec(GaugeObject *self, PyObject *const *args, Py_ssize_t n,
                           PyObject *kwnames)
{
    return gauge_add(self, args, n, kwnames, -1.0);
}

static PyObject *Gauge_get(GaugeObject *self, PyObject *unused)
{
    if (!self->g.slot)
        return not_observable((PyObject *)self);
    return PyFloat_FromDouble(mv_gauge_value(self->g));
}

static PyObject *Histogram_observe(HistogramObject *self, PyObject *const *args, Py_ssize_t n,
                                   PyObject *kwnames)
{
    if (__builtin_expect(!self->h, 0))
        return not_observable((PyObject *)self);
    double v;
    PyObject *o;
    if (kwnames || n != 1) {
        if (one_arg(args, n, kwnames, "amount", 1, &o))
            return NULL;
        if (!o) {
            PyErr_SetString(PyExc_TypeError, "observe(amount)");
            return NULL;
        }
    } else
        o = args[0];
    if (get_double(o, &v))
        return NULL;
    mv_histogram_observe(self->h, v);
    Py_RETURN_NONE;
}

/* read() -> (count, sum, buckets, bounds): non-cumulative bucket counts (the last is +Inf)
 * and the finite bounds, as a reader sums the shards. */
static PyObject *Histogram_read(HistogramObject *self, PyObject *unused)
{
    uint64_t count, b[MAX_BUCKETS + 1];
    double sum;
    const double *bounds;
    size_t nb = mv_histogram_read(self->h, &count, &sum, b, &bounds);
    PyObject *bt = PyTuple_New((Py_ssize_t)nb + 1), *bd = PyTuple_New((Py_ssize_t)nb);
    if (!bt || !bd)
        goto fail;
    for (size_t i = 0; i <= nb; i++) {
        PyObject *x = PyLong_FromUnsignedLongLong(nb ? b[i] : 0);
        if (!x)
            goto fail;
        PyTuple_SET_ITEM(bt, (Py_ssize_t)i, x);
    }
    for (size_t i = 0; i < nb; i++) {
        PyObject *x = PyFloat_FromDouble(bounds[i]);
        if (!x)
            goto fail;
        PyTuple_SET_ITEM(bd, (Py_ssize_t)i, x);
    }
    return Py_BuildValue("(KdNN)", (unsigned long long)count, sum, bt, bd);
fail:
    Py_XDECREF(bt);
    Py_XDECREF(bd);
    return NULL;
}

static PyObject *set_exemplar_check(PyObject *m, PyObject *fn)
{
    Py_XDECREF(exemplar_check);
    exemplar_check = fn == Py_None ? NULL : fn;
    Py_XINCREF(exemplar_check);
    Py_RETURN_NONE;
}

#define KW_METHOD(f) (PyCFunction)(void (*)(void))(f), METH_FASTCALL | METH_KEYWORDS

static PyMethodDef Counter_methods[] = {
    {"inc", KW_METHOD(Counter_inc),
     "inc(amount=1, exemplar=None): adds a non-negative amount (one atomic add; fractions are "
     "carried in the handle and reach the segment as whole units)."},
    {"get", (PyCFunction)Counter_get, METH_NOARGS,
     "Reads the counter: an int, or a float while a fraction is pending."},
    {"labels", (PyCFunction)(void (*)(void))Handle_labels, METH_FASTCALL | METH_KEYWORDS,
     "labels(*values, **names): the child series for these label values."},
    {"_attach", (PyCFunction)Handle_attach, METH_O, "_attach(handle): update its series."},
    {"_family", (PyCFunction)Handle_family, METH_VARARGS,
     "_family(children, labelnames): what labels() looks up."},
    {NULL}};

static PyMethodDef FCounter_methods[] = {
    {"inc", KW_METHOD(FCounter_inc),
     "inc(amount=1, exemplar=None): adds a non-negative finite amount (a whole amount is one "
     "atomic add, a fractional one a compare-and-swap on the accumulator)."},
    {"get", (PyCFunction)FCounter_get, METH_NOARGS, "Reads the counter (a float)."},
    {"labels", (PyCFunction)(void (*)(void))Handle_labels, METH_FASTCALL | METH_KEYWORDS,
     "labels(*values, **names): the child series for these label values."},
    {"_attach", (PyCFunction)Handle_attach, METH_O, "_attach(handle): update its series."},
    {"_family", (PyCFunction)Handle_family, METH_VARARGS,
     "_family(children, labelnames): what labels() looks up."},
    {NULL}};

static PyMethodDef Gauge_methods[] = {
    {"set", KW_METHOD(Gauge_set), "set(value): one store."},
    {"inc", KW_METHOD(Gauge_inc), "inc(amount=1)"},
    {"dec", KW_METHOD(Gauge_dec), "dec(amount=1)"},
    {"get", (PyCFunction)Gauge_get, METH_NOARGS, "Reads the gauge."},
    {"labels", (PyCFunction)(void (*)(void))Handle_labels, METH_FASTCALL | METH_KEYWORDS,
     "labels(*values, **names): the child series for these label values."},
    {"_attach", (PyCFunction)Handle_attach, METH_O, "_attach(handle): update its series."},
    {"_family", (PyCFunction)Handle_family, METH_VARARGS,
     "_family(children, labelnames): what labels() looks up."},
    {NULL}};

static PyMethodDef Histogram_methods[] = {
    {"observe", KW_METHOD(Histogram_observe),
     "observe(amount, exemplar=None): records one observation (NaN counts: +Inf bucket, the "
     "sum turns NaN)."},
    {"read", (PyCFunction)Histogram_read, METH_NOARGS,
     "read() -> (count, sum, buckets, bounds) as a reader sums them."},
    {"labels", (PyCFunction)(void (*)(void))Handle_labels, METH_FASTCALL | METH_KEYWORDS,
     "labels(*values, **names): the child series for these label values."},
    {"_attach", (PyCFunction)Handle_attach, METH_O, "_attach(handle): update its series."},
    {"_family", (PyCFunction)Handle_family, METH_VARARGS,
     "_family(children, labelnames): what labels() looks up."},
    {NULL}};

#define HANDLE_TYPE(T, pyname, size, methods, doc)                                                 \
    static PyTypeObject T = {                                                                      \
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = "microview._microview." pyname,                   \
        .tp_basicsize = sizeof(size),                                                              \
        .tp_dealloc = (destructor)Handle_dealloc,                                                  \
        .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,                                      \
        .tp_doc = doc,                                                                             \
        .tp_methods = methods,                                                                     \
        .tp_new = PyType_GenericNew,                                                               \
    }

HANDLE_TYPE(CounterType, "CounterHandle", CounterObject, Counter_methods,
            "A registered counter series (type 1).");
HANDLE_TYPE(FCounterType, "FCounterHandle", FCounterObject, FCounter_methods,
            "A registered fractional counter series (type 4).");
HANDLE_TYPE(GaugeType, "GaugeHandle", GaugeObject, Gauge_methods, "A registered gauge series.");
HANDLE_TYPE(HistogramType, "HistogramHandle", HistogramObject, Histogram_methods,
            "A registered histogram series.");

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

static PyMethodDef module_methods[] = {
    {"set_exemplar_check", set_exemplar_check, METH_O,
     "set_exemplar_check(fn): fn(exemplar) validates an exemplar= argument (raising "
     "ValueError); the segment does not store exemplars."},
    {NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "microview._microview",
    .m_doc = "Binding of libmicroview; use the microview package instead.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__microview(void);

PyMODINIT_FUNC PyInit__microview(void)
{
    PyTypeObject *types[] = {&SegmentType, &CounterType, &FCounterType, &GaugeType, &HistogramType};
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

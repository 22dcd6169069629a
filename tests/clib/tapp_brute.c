/*
 * A small TAPP C library used to test pytapp's clib bridge: the TAPP C API (int error codes,
 * intptr_t handles) implemented by brute force for F64 and C64 (complex double) data.
 * Other datatypes and precisions return code 18 ("not supported"), with a text.
 *
 * ABI: the released TAPP C API by default. Built with -DTAPP_MULTI_TAPP it follows the
 * "multi-tapp" branch of the reference instead (TAPP_create_handle takes a library id; every
 * other call takes the handle: second for tensor infos, products, execute, status,
 * explain_error; last for executors). Built with -DTAPP_MINIMAL it exports only the four
 * mandatory functions (no executor, no destroy functions, no explain_error). Built with
 * -DTAPP_CUTENSOR_BINDINGS it follows the cutensor_bindings branch (TAPP_create_tensor_info takes
 * the handle second; TAPP_attr_get returns through void**). Built with -DTAPP_ASYNC it also
 * exports upstream's proposed asynchronous symbols (TAPP_executor_wait,
 * TAPP_executor_get_status, TAPP_status_check_completion, TAPP_status_get_error) with real
 * status objects, and TAPP_implementation_name.
 *
 * Like the official reference, a product keeps the *handles* of its tensor infos and reads
 * them at every execute; an info destroyed before its product makes execute return 99 (a
 * use-after-free that the bridge must never cause). tapp_brute_live(kind) counts live objects
 * (0 handles, 1 executors, 2 tensor infos, 3 products) so tests can check that every object
 * is destroyed, and in the right order.
 *
 * Behaviour switches for fault-injection tests (environment, read at each call):
 *   TAPP_BRUTE_FAULT=unknown_code   execute returns 4242, which has no text
 *   TAPP_BRUTE_FAULT=no_text        execute returns 77 and explain_error writes nothing
 *   TAPP_BRUTE_FAULT=crash          execute dereferences NULL
 *   TAPP_BRUTE_FAULT=hang           execute never returns
 *   TAPP_BRUTE_FAULT=wrong          execute adds 1 to every element of D (wrong values)
 *   TAPP_BRUTE_FAULT=explain_crash  explain_error dereferences NULL for code 30 (as the
 *                                   official reference does for codes without text)
 *   TAPP_BRUTE_FAULT=write_then_fail  execute writes D (every element 1234) and returns 15
 *   TAPP_BRUTE_FAULT=async_fail     (TAPP_ASYNC) execute returns 0, writes D, and its status
 *                                   reports FAILED with error 15
 */
#include <complex.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int TAPP_error;
typedef intptr_t TAPP_handle, TAPP_executor, TAPP_status, TAPP_tensor_info,
    TAPP_tensor_product;
typedef int TAPP_datatype, TAPP_prectype, TAPP_element_op;

#ifdef TAPP_MINIMAL
#define OPTIONAL static __attribute__((unused))
#else
#define OPTIONAL
#endif

/* The multi-tapp branch passes the handle as the second argument of most calls. */
#ifdef TAPP_MULTI_TAPP
#define HANDLE_ARG , TAPP_handle handle_arg
#define UNUSED_HANDLE (void)handle_arg
#else
#define HANDLE_ARG
#define UNUSED_HANDLE
#endif

enum { F64 = 1, C64 = 3, DEFAULT_PREC = -1, F64_PREC = 1 };
enum { MAX_LIVE = 4096 };

static int live[4];
static const void *live_infos[MAX_LIVE];

int tapp_brute_live(int kind) { return (kind >= 0 && kind < 4) ? live[kind] : -1; }

static void info_born(const void *p) {
    for (int i = 0; i < MAX_LIVE; i++)
        if (!live_infos[i]) { live_infos[i] = p; break; }
    live[2]++;
}
static int info_alive(const void *p) {
    for (int i = 0; i < MAX_LIVE; i++)
        if (live_infos[i] == p) return 1;
    return 0;
}
static void info_died(const void *p) {
    for (int i = 0; i < MAX_LIVE; i++)
        if (live_infos[i] == p) { live_infos[i] = NULL; break; }
    live[2]--;
}

typedef struct {
    TAPP_datatype type;
    int nmode;
    int64_t *extents, *strides;
} info_t;

typedef struct {
    const info_t *info[4]; /* not copies: the infos must outlive the product */
    int64_t *idx[4];
    int op[4];
    int is_complex;
} product_t;

static const char *fault(void) {
    const char *f = getenv("TAPP_BRUTE_FAULT");
    return f ? f : "";
}

OPTIONAL size_t TAPP_explain_error(TAPP_error error HANDLE_ARG, size_t maxlen, char *message) {
    const char *text;
    UNUSED_HANDLE;
    if (error == 30 && strcmp(fault(), "explain_crash") == 0) {
        volatile int *nothing = NULL;
        *nothing = 1;
    }
    switch (error) {
    case 0: text = "Success."; break;
    case 4: text = "Tensor D has indices not shared with tensor A or B."; break;
    case 13: text = "Nmode can not be negative."; break;
    case 14: text = "Extents can not be negative."; break;
    case 18: text = "Only F64 and C64 data with default or F64 precision are supported."; break;
    case 99: text = "A tensor info of this product was destroyed before the product."; break;
    case 15: text = "The brute library failed after writing D (fault injection)."; break;
    case 4242: text = ""; break;
    case 77: text = ""; break;
    default: text = "Unknown error."; break;
    }
    if (error == 77 && strcmp(fault(), "no_text") == 0) text = "";
    size_t n = strlen(text);
    if (maxlen == 0) return n;
    if (n > maxlen - 1) n = maxlen - 1;
    memcpy(message, text, n);
    message[n] = '\0';
    return n;
}

#ifdef TAPP_MULTI_TAPP
TAPP_error TAPP_create_handle(uint64_t lib_id, TAPP_handle *handle) {
    (void)lib_id;
#else
TAPP_error TAPP_create_handle(TAPP_handle *handle) {
#endif
    *handle = (TAPP_handle)malloc(8);
    live[0]++;
    return 0;
}
OPTIONAL TAPP_error TAPP_destroy_handle(TAPP_handle handle) {
    free((void *)handle);
    live[0]--;
    return 0;
}
#ifdef TAPP_MULTI_TAPP
TAPP_error TAPP_create_executor(TAPP_executor *exec, TAPP_handle handle) {
    if (!handle) return 33;
#else
OPTIONAL TAPP_error TAPP_create_executor(TAPP_executor *exec) {
#endif
    *exec = (TAPP_executor)malloc(8);
    live[1]++;
    return 0;
}
#ifdef TAPP_MULTI_TAPP
TAPP_error TAPP_destroy_executor(TAPP_executor exec, TAPP_handle handle) {
    (void)handle;
#else
OPTIONAL TAPP_error TAPP_destroy_executor(TAPP_executor exec) {
#endif
    free((void *)exec);
    live[1]--;
    return 0;
}
#ifdef TAPP_ASYNC
/* A status records the outcome of one execution: 1 complete, 2 failed, with its error. */
typedef struct { int completion, error; } status_t;
static status_t *last_status;
static TAPP_status new_status(int error) {
    status_t *s = malloc(sizeof(status_t));
    s->completion = error ? 2 : 1;
    s->error = error;
    last_status = s;
    return (TAPP_status)s;
}
TAPP_error TAPP_destroy_status(TAPP_status status) {
    if (last_status == (status_t *)status) last_status = NULL;
    free((void *)status);
    return 0;
}
TAPP_error TAPP_status_check_completion(TAPP_status status, int *completion, int *error) {
    const status_t *s = (const status_t *)status;
    if (completion) *completion = s->completion;
    if (error) *error = s->error;
    return 0;
}
TAPP_error TAPP_status_get_error(TAPP_status status) { return ((status_t *)status)->error; }
TAPP_error TAPP_executor_wait(TAPP_executor exec) { (void)exec; return 0; }
TAPP_error TAPP_executor_get_status(TAPP_executor exec, TAPP_status *status) {
    (void)exec;
    *status = new_status(last_status ? last_status->error : 0);
    return 0;
}
const char *TAPP_implementation_name(void) { return "tapp_brute (pytapp test library)"; }
#else
OPTIONAL TAPP_error TAPP_destroy_status(TAPP_status status HANDLE_ARG) {
    UNUSED_HANDLE;
    (void)status;
    return 0;
}
#endif

#ifdef TAPP_CUTENSOR_BINDINGS
/* Attributes of any object: key 1 only, read through void** (the cutensor_bindings form). */
static int attr_one = 7;
TAPP_error TAPP_attr_get(intptr_t attr, int key, void **value) {
    (void)attr;
    if (key != 1) return 18;
    *value = &attr_one;
    return 0;
}
#endif

static int64_t *copy64(const int64_t *src, int n) {
    int64_t *dst = malloc(sizeof(int64_t) * (n > 0 ? n : 1));
    if (n > 0) memcpy(dst, src, sizeof(int64_t) * n);
    return dst;
}

#if defined(TAPP_MULTI_TAPP) || defined(TAPP_CUTENSOR_BINDINGS)
TAPP_error TAPP_create_tensor_info(TAPP_tensor_info *info, TAPP_handle handle,
                                   TAPP_datatype type, int nmode, const int64_t *extents,
                                   const int64_t *strides) {
    if (!handle) return 33;
#else
TAPP_error TAPP_create_tensor_info(TAPP_tensor_info *info, TAPP_datatype type, int nmode,
                                   const int64_t *extents, const int64_t *strides) {
#endif
    if (nmode < 0) return 13;
    for (int i = 0; i < nmode; i++)
        if (extents[i] < 0) return 14;
    info_t *t = malloc(sizeof(info_t));
    t->type = type;
    t->nmode = nmode;
    t->extents = copy64(extents, nmode);
    t->strides = copy64(strides, nmode);
    *info = (TAPP_tensor_info)t;
    info_born(t);
    return 0;
}

OPTIONAL TAPP_error TAPP_destroy_tensor_info(TAPP_tensor_info info HANDLE_ARG) {
    info_t *t = (info_t *)info;
    UNUSED_HANDLE;
    info_died(t);
    free(t->extents);
    free(t->strides);
    free(t);
    return 0;
}

TAPP_error TAPP_create_tensor_product(TAPP_tensor_product *plan, TAPP_handle handle,
                                      TAPP_element_op op_A, TAPP_tensor_info A,
                                      const int64_t *idx_A, TAPP_element_op op_B,
                                      TAPP_tensor_info B, const int64_t *idx_B,
                                      TAPP_element_op op_C, TAPP_tensor_info C,
                                      const int64_t *idx_C, TAPP_element_op op_D,
                                      TAPP_tensor_info D, const int64_t *idx_D,
                                      TAPP_prectype prec) {
    (void)handle;
    info_t *in[4] = {(info_t *)A, (info_t *)B, (info_t *)C, (info_t *)D};
    const int64_t *idx[4] = {idx_A, idx_B, idx_C, idx_D};
    int ops[4] = {op_A, op_B, op_C, op_D};
    int type = in[3]->type;
    if (type != F64 && type != C64) return 18;
    for (int k = 0; k < 4; k++)
        if (in[k]->type != type) return 18;
    if (prec != DEFAULT_PREC && prec != F64_PREC) return 18;
    /* every label of D must be in A or B */
    for (int i = 0; i < in[3]->nmode; i++) {
        int found = 0;
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < in[k]->nmode; j++)
                if (idx[k][j] == idx[3][i]) found = 1;
        if (!found) return 4;
    }
    product_t *p = malloc(sizeof(product_t));
    for (int k = 0; k < 4; k++) {
        p->info[k] = in[k];
        p->idx[k] = copy64(idx[k], in[k]->nmode);
        p->op[k] = ops[k];
    }
    p->is_complex = type == C64;
    *plan = (TAPP_tensor_product)p;
    live[3]++;
    return 0;
}

OPTIONAL TAPP_error TAPP_destroy_tensor_product(TAPP_tensor_product plan HANDLE_ARG) {
    product_t *p = (product_t *)plan;
    UNUSED_HANDLE;
    for (int k = 0; k < 4; k++) free(p->idx[k]);
    free(p);
    live[3]--;
    return 0;
}

/* Offset of tensor k for the current label values. */
static int64_t offset(const product_t *p, int k, const int64_t *labels, const int64_t *values,
                      int nlabels) {
    int64_t off = 0;
    for (int j = 0; j < p->info[k]->nmode; j++)
        for (int l = 0; l < nlabels; l++)
            if (labels[l] == p->idx[k][j]) off += values[l] * p->info[k]->strides[j];
    return off;
}

TAPP_error TAPP_execute_product(TAPP_tensor_product plan HANDLE_ARG, TAPP_executor exec,
                                TAPP_status *status, const void *alpha, const void *A,
                                const void *B, const void *beta, const void *C, void *D) {
    (void)exec;
    UNUSED_HANDLE;
    if (strcmp(fault(), "unknown_code") == 0) return 4242;
    if (strcmp(fault(), "no_text") == 0) return 77;
    if (strcmp(fault(), "crash") == 0) {
        volatile int *nothing = NULL;
        *nothing = 1;
    }
    while (strcmp(fault(), "hang") == 0) sleep(1);
    const product_t *p = (const product_t *)plan;
    for (int k = 0; k < 4; k++)
        if (!info_alive(p->info[k])) return 99;
    int fail_after = strcmp(fault(), "write_then_fail") == 0;
#ifdef TAPP_ASYNC
    int status_fails = strcmp(fault(), "async_fail") == 0;
    fail_after |= status_fails;
    if (status) *status = new_status(status_fails ? 15 : 0);
#else
    if (status) *status = 0;
#endif
    /* distinct labels: those of D first (output space), then the summed ones */
    int64_t labels[256], extent[256];
    int nd = 0, n = 0;
    for (int k = 3; k >= 0; k--) {
        if (k == 2) continue;
        for (int j = 0; j < p->info[k]->nmode; j++) {
            int seen = 0;
            for (int l = 0; l < n; l++) seen |= labels[l] == p->idx[k][j];
            if (!seen && n < 256) {
                labels[n] = p->idx[k][j];
                extent[n] = p->info[k]->extents[j];
                n++;
            }
        }
        if (k == 3) nd = n;
    }
    int64_t values[256];
    int64_t dsize = 1, ssize = 1;
    for (int l = 0; l < nd; l++) dsize *= extent[l];
    for (int l = nd; l < n; l++) ssize *= extent[l];
    double complex al = p->is_complex ? *(const double complex *)alpha : *(const double *)alpha;
    double complex be = p->is_complex ? *(const double complex *)beta : *(const double *)beta;
    for (int64_t di = 0; di < dsize; di++) {
        int64_t rest = di;
        for (int l = 0; l < nd; l++) { values[l] = rest % extent[l]; rest /= extent[l]; }
        double complex acc = 0;
        for (int64_t si = 0; si < ssize; si++) {
            int64_t r2 = si;
            for (int l = nd; l < n; l++) { values[l] = r2 % extent[l]; r2 /= extent[l]; }
            int64_t oa = offset(p, 0, labels, values, n), ob = offset(p, 1, labels, values, n);
            double complex a = p->is_complex ? ((const double complex *)A)[oa]
                                             : ((const double *)A)[oa];
            double complex b = p->is_complex ? ((const double complex *)B)[ob]
                                             : ((const double *)B)[ob];
            if (p->op[0]) a = conj(a);
            if (p->op[1]) b = conj(b);
            acc += a * b;
        }
        acc *= al;
        if (be != 0) {
            int64_t oc = offset(p, 2, labels, values, nd);
            double complex c = p->is_complex ? ((const double complex *)C)[oc]
                                             : ((const double *)C)[oc];
            if (p->op[2]) c = conj(c);
            acc += be * c;
        }
        if (p->op[3]) acc = conj(acc);
        int64_t od = offset(p, 3, labels, values, nd);
        if (fail_after) acc = 1234;
        if (strcmp(fault(), "wrong") == 0) acc += 1;
        if (p->is_complex) ((double complex *)D)[od] = acc;
        else ((double *)D)[od] = creal(acc);
    }
#ifdef TAPP_ASYNC
    if (fail_after && !status_fails) return 15;
#else
    if (fail_after) return 15;
#endif
    return 0;
}

/*
** pickle.h (inside host/core): a strict reader of Python pickles (protocols 0 to 5) into an inert
** tree of values, for the torch.save and CIFAR readers. Nothing is ever called: a global is only
** a name, and only the names the caller allows are accepted; REDUCE and BUILD only record their
** callable, arguments and state for the caller to interpret. Everything else is refused with
** the opcode and its offset. Memory is bounded by the input: strings point into it.
*/
#ifndef DPY_PICKLE_H
#define DPY_PICKLE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    PK_NONE, PK_BOOL, PK_INT, PK_FLOAT, PK_BYTES, PK_STR, PK_TUPLE, PK_LIST, PK_DICT,
    PK_GLOBAL, PK_CALL, PK_PERSID
} pk_kind;

typedef struct {
    pk_kind kind;
    int64_t i;                  /* PK_BOOL, PK_INT; PK_GLOBAL: its index in the allowed names */
    double f;                   /* PK_FLOAT */
    const uint8_t *s;           /* PK_BYTES, PK_STR (UTF-8): not NUL-terminated */
    size_t len;
    int32_t *items;             /* PK_TUPLE, PK_LIST: elements; PK_DICT: key, value, ...;
                                ** PK_CALL: callable, args, state (-1: none); PK_PERSID: pid */
    int32_t n, cap;
} pk_value;

typedef struct {
    pk_value *v;
    int32_t nv, capv;
    int32_t root;               /* what STOP returned */
    uint8_t **owned;            /* decoded byte strings (_codecs.encode) */
    int32_t nowned, capowned;
} pk_doc;

/* Parses the len bytes at buf (which must outlive doc); globals lists the allowed
** "module.name"s (_codecs.encode and collections.OrderedDict are understood when allowed). */
int pk_parse(pk_doc *doc, const uint8_t *buf, size_t len, const char *const *globals,
             int nglobals, const char *what, char *err, size_t errlen);
void pk_free(pk_doc *doc);

/* The value at index i (NULL for -1 or out of range). */
const pk_value *pk_at(const pk_doc *doc, int32_t i);
/* 1 when v is a str or bytes equal to s */
int pk_text_is(const pk_value *v, const char *s);
/* The value of key s in a dict (str or bytes keys), or -1 */
int32_t pk_dict_get(const pk_doc *doc, const pk_value *dict, const char *s);
/* 1 when value i is the allowed global number g */
int pk_is_global(const pk_doc *doc, int32_t i, int g);

#endif

/*
** chunks.c: the Lua modules compiled once per process. Every node thread has its own Lua state
** and requires the same ~50 modules; parsing them again in each state took ~10 ms of a node's
** start (a quarter of the time to the first round at 1024 nodes). The Lua searcher is wrapped:
** a module's file is compiled once, dumped with its debug information (the same source names,
** lines and tracebacks), and every state loads that bytecode, which is ~8x faster than parsing.
** An entry is checked against the file's size and mtime at each load, so a changed file is
** compiled afresh. A missing file or a file that does not compile goes to Lua's own searcher,
** so the messages are Lua's. Where a framework module (dpy.*) lies is also found once per process
** and path: package.searchpath opens each candidate file to test it, ~30 opens and closes a node
** (host.module_file answers from the same memory: the registry asks it for a component's file).
** A file put ahead of the one found, later in the process, is not seen; in a node's path lua/'s
** ?.lua comes first, where every framework module but the folders' init.lua lies.
** While a process's nodes start (dpy_chunks_hold), a framework module found unchanged is not checked
** again: the nodes of one start load the same code, and each of their ~27 requires was a stat
** (~60 us of a node's start on a virtual machine).
*/
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "dpy_lua.h"

typedef struct chunk {
    struct chunk *next;
    XXH64_hash_t hash;    /* of file: the lists are walked by every require of every node */
    unsigned checked;     /* the hold (g_hold) in which file was last found unchanged */
    char *file;
    struct timespec mtime;
    off_t size;
    char *code;
    size_t len;
} chunk;

/* Where package.searchpath found a framework module; key: "<name>\n<package.path>" (the name
** first, so keys differ early). */
typedef struct found {
    struct found *next;
    XXH64_hash_t hash;    /* of key */
    unsigned seen;        /* the hold (g_hold) in which file was last seen there */
    char *key;
    char *file;
} found;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static chunk *g_chunks;   /* under g_mu; entries are never freed, only added or replaced */
static found *g_found;    /* under g_mu; likewise */
static int g_holders;     /* under g_mu: the starts going on */
static unsigned g_hold;   /* under g_mu: numbers the holds; one begins as the first start does */

void dpy_chunks_hold(int on) {
    pthread_mutex_lock(&g_mu);
    if (on && g_holders++ == 0)
        g_hold++;
    else if (!on && g_holders > 0)
        g_holders--;
    pthread_mutex_unlock(&g_mu);
}

static XXH64_hash_t hash_of(const char *s) { return XXH3_64bits(s, strlen(s)); }

typedef struct { char *p; size_t len, cap; int failed; } dump_buf;

static int dump_writer(lua_State *L, const void *p, size_t sz, void *ud) {
    (void)L;
    dump_buf *b = ud;
    if (b->len + sz > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + sz)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->failed = 1;
            return 1;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, sz);
    b->len += sz;
    return 0;
}

static int same_file(const chunk *c, const struct stat *st) {
    return c->size == st->st_size && c->mtime.tv_sec == st->st_mtim.tv_sec &&
           c->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

/* Loads file's compiled chunk onto the stack from the cache; 0 when it has none (nothing pushed).
** st: what stat says of file now; NULL: a hit only if file was found unchanged in this hold. */
static int load_cached(lua_State *L, const char *file, const struct stat *st) {
    XXH64_hash_t h = hash_of(file);
    pthread_mutex_lock(&g_mu);
    int held = g_holders > 0;
    chunk *c = st || held ? g_chunks : NULL;   /* unchecked only in a hold: outside one, no walk */
    while (c && (c->hash != h || strcmp(c->file, file) != 0))
        c = c->next;
    int hit = c && (st ? same_file(c, st) : held && c->checked == g_hold);
    if (hit && st && held)
        c->checked = g_hold;
    const char *code = hit ? c->code : NULL;
    size_t len = hit ? c->len : 0;
    pthread_mutex_unlock(&g_mu);   /* an entry's code is never freed: readable unlocked */
    if (!hit)
        return 0;
    if (luaL_loadbufferx(L, code, len, file, "b") != LUA_OK) {
        lua_pop(L, 1);
        return 0;
    }
    return 1;
}

/* Keeps the compiled function on top of the stack in the cache (best effort: memory). A framework
** module's dump is kept without its locals' names (strip_locals.c), and the function on the stack
** is replaced by the one loaded from it: this state's copy is then as every other state's. */
static void store(lua_State *L, const char *file, const struct stat *st, int framework) {
    dump_buf b = {0};
    if (lua_dump(L, dump_writer, &b, 0) != 0 || b.failed) {
        free(b.p);
        return;
    }
    char *stripped = framework ? malloc(b.len) : NULL;
    size_t len = stripped ? dpy_strip_locals(b.p, b.len, stripped) : 0;
    if (len && luaL_loadbufferx(L, stripped, len, file, "b") == LUA_OK) {
        lua_remove(L, -2);   /* the compiled function: the stripped one in its place */
        free(b.p);
        b.p = stripped;
        b.len = len;
    } else {
        if (len)
            lua_pop(L, 1);   /* the message: the full dump is kept */
        free(stripped);
    }
    chunk *c = calloc(1, sizeof *c);
    char *name = c ? strdup(file) : NULL;
    if (!name) {
        free(c);
        free(b.p);
        return;
    }
    c->file = name;
    c->hash = hash_of(name);
    c->mtime = st->st_mtim;
    c->size = st->st_size;
    c->code = b.p;
    c->len = b.len;
    pthread_mutex_lock(&g_mu);   /* newest first: a replaced file's entry is found before the old one */
    c->checked = g_holders > 0 ? g_hold : 0;
    c->next = g_chunks;
    g_chunks = c;
    pthread_mutex_unlock(&g_mu);
}

/* The entry remembered for key; NULL when none. *seen (unless NULL): whether its file was seen
** there in this hold, and so is not looked at again. */
static found *found_entry(const char *key, int *seen) {
    XXH64_hash_t h = hash_of(key);
    pthread_mutex_lock(&g_mu);
    found *f = g_found;
    while (f && (f->hash != h || strcmp(f->key, key) != 0))
        f = f->next;
    if (seen)
        *seen = f && g_holders > 0 && f->seen == g_hold;
    pthread_mutex_unlock(&g_mu);
    return f;   /* never freed, its key and file never written: readable unlocked */
}

/* Records that f's file is there now (in a hold; outside one nothing is kept). */
static void mark_seen(found *f) {
    pthread_mutex_lock(&g_mu);
    if (g_holders > 0)
        f->seen = g_hold;
    pthread_mutex_unlock(&g_mu);
}

static void remember(const char *key, const char *file) {
    found *f = calloc(1, sizeof *f);
    char *k = f ? strdup(key) : NULL, *v = k ? strdup(file) : NULL;
    if (!v) {   /* best effort: memory */
        free(k);
        free(f);
        return;
    }
    f->key = k;
    f->hash = hash_of(k);
    f->file = v;
    pthread_mutex_lock(&g_mu);   /* newest first: a moved module's new place is found first */
    f->seen = g_holders > 0 ? g_hold : 0;
    f->next = g_found;
    g_found = f;
    pthread_mutex_unlock(&g_mu);
}

/* Pushes the file package.searchpath finds for name, or nil; nothing else. */
static void search_path(lua_State *L, const char *name) {
    int top = lua_gettop(L);
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "searchpath");
    lua_pushstring(L, name);
    lua_getfield(L, -3, "path");
    if (lua_isfunction(L, -3) && lua_isstring(L, -1) && lua_pcall(L, 2, 1, 0) == LUA_OK &&
        lua_isstring(L, -1)) {
        lua_replace(L, top + 1);   /* over package */
        lua_settop(L, top + 1);
    } else {
        lua_settop(L, top);
        lua_pushnil(L);
    }
}

/* Pushes the key of name's place: "<name>\n<package.path>"; returns it. */
static const char *push_key(lua_State *L, const char *name) {
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "path");
    lua_pushfstring(L, "%s\n%s", name, lua_isstring(L, -1) ? lua_tostring(L, -1) : "");
    lua_replace(L, -3);   /* over package */
    lua_pop(L, 1);
    return lua_tostring(L, -1);
}

/* package.searchers[2]'s stand-in; upvalue 1: Lua's own searcher. */
static int searcher(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    int framework = strncmp(name, "dpy.", 4) == 0;
    const char *key = NULL, *file = NULL;
    struct stat st;
    if (framework) {
        key = push_key(L, name);
        found *f = found_entry(key, NULL);
        file = f ? f->file : NULL;
        if (file && load_cached(L, file, NULL))   /* found unchanged in this hold */
            goto loaded;
        if (file && stat(file, &st) != 0)
            file = NULL;   /* gone: search again */
    }
    if (!file) {
        search_path(L, name);
        file = lua_tostring(L, -1);
        if (file && stat(file, &st) != 0)
            file = NULL;
        if (file && framework)
            remember(key, file);
    }
    if (file) {
        if (load_cached(L, file, &st))
            goto loaded;
        if (luaL_loadfilex(L, file, NULL) == LUA_OK) {
            store(L, file, &st, framework);
            goto loaded;
        }
    }
    lua_settop(L, 1);   /* not found, or no chunk: Lua's searcher says why, in its words */
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
loaded:
    lua_pushstring(L, file);   /* as Lua's searcher: the loader, and the file for its second argument */
    return 2;
}

void dpy_chunks_module_file(lua_State *L, const char *name) {
    const char *key = push_key(L, name);
    int there;   /* seen in this start: its files hold still */
    found *f = found_entry(key, &there);
    struct stat st;
    if (f && !there && stat(f->file, &st) == 0) {
        mark_seen(f);
        there = 1;
    }
    if (there) {
        lua_pushstring(L, f->file);
    } else {   /* not remembered, or gone: looked for (a miss every time) */
        search_path(L, name);
        if (lua_isstring(L, -1))
            remember(key, lua_tostring(L, -1));
    }
    lua_remove(L, -2);   /* the key */
}

void dpy_chunks_install(lua_State *L) {
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "searchers");
    if (lua_istable(L, -1) && lua_rawgeti(L, -1, 2) == LUA_TFUNCTION) {
        lua_pushcclosure(L, searcher, 1);
        lua_rawseti(L, -2, 2);
    } else {
        lua_pop(L, 1);
    }
    lua_pop(L, 2);
}

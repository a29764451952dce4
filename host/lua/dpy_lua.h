/*
** dpy_lua.h: what the bindings share: the per-state record, the boxes' checkers and pushers,
** and argument helpers. Every l_<type>.c exports luaopen_dpy_<type>_core.
*/
#ifndef DPY_LUA_H
#define DPY_LUA_H

#include <lauxlib.h>
#include <lua.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/types.h>   /* pid_t */

#include "dpy_torch.h"

/* {==== per-state record (in the state's extra space) ====} */

typedef struct dpy_state {
    int uid;                        /* node uid, -1 for the command's own state */
    size_t lua_bytes, lua_cap;      /* Lua heap in use and its cap (0: none) */
    size_t tensor_floor;            /* tensor_live after the last GC nudge (or lower since) */
    size_t tensor_peak;             /* largest tensor_live seen */
    size_t tensor_live;             /* bytes held by live tensor boxes alone (dpy_tensor_own_bytes) */
    int last;                       /* 1 while its last protected call runs, 2 after: none raises */
    int unwinding;                  /* an error under way to a dpy_state_pcall: no interrupt raises */
} dpy_state;

/* Creates a Lua state counting its heap into st, with the bindings preloaded and package.path
** pointing at lua_dir. Returns NULL with a message in err on failure. */
lua_State *dpy_state_open(dpy_state *st, const char *lua_dir, char *err, size_t errlen);
dpy_state *dpy_state_of(lua_State *L);
/* lua_pcall with a traceback message handler. */
int dpy_state_pcall(lua_State *L, int nargs, int nres);
/* dpy_state_pcall for a node's last work under the run's interrupt: once it has returned, an
** interrupt no longer raises in L, so that what the node writes after it (its metrics, its log's
** last line) is written whole. Once per state: a second call raises an error. */
int dpy_state_pcall_last(lua_State *L, int nargs, int nres);
/* Asks the running Lua code to stop with "interrupted!" (safe from a signal handler on the thread
** that runs L; from another thread, lua_sethook's walk of L's call frames races with L's own calls). */
void dpy_state_interrupt(lua_State *L);
/* For a signal's handler: interrupts L when the signal came to runner, the thread that runs L, and
** returns 1; else passes the signal on to runner (a process's signal goes to any of its threads,
** libtorch's too) and returns 0. */
int dpy_state_interrupt_signal(lua_State *L, pthread_t runner, int sig);
void dpy_preload_bindings(lua_State *L);
/* Tab in GNU readline completes with the function at index: fn(text) -> { words } (index 0 or
** nil: no completion). L must outlive the editor (complete.c). */
void dpy_readline_complete(lua_State *L, int index);
/* Makes require load Lua modules compiled once per process (chunks.c). */
void dpy_chunks_install(lua_State *L);
/* While a process's nodes start (on: one more start; off: one fewer), a framework module's file
** found unchanged is not checked again, in any state of the process; starts that overlap share one
** hold. */
void dpy_chunks_hold(int on);
/* Pushes the file require loads the framework module name (dpy.*) from, or nil: package.searchpath's
** answer in package.path, remembered as the searcher remembers it, and within a start not looked
** at again once seen there; a miss is looked for every time. */
void dpy_chunks_module_file(lua_State *L, const char *name);
/* Writes into out (len bytes at least) the Lua dump in without its local variables' names;
** returns the length written, or 0 where in is not a dump this Lua wrote (strip_locals.c). */
size_t dpy_strip_locals(const char *in, size_t len, char *out);
/* The directory of the dpy Lua modules, set once by main() for every state of the process. */
void dpy_set_lua_dir(const char *dir);
const char *dpy_lua_dir(void);
/* This build's fingerprint (16 hex digits: its C sources and its Lua tree's modules), or NULL and
** why in err. Hashed once per process (build_id.c). */
const char *dpy_build_id(char *err, size_t errlen);

/* {==== userdata types ====} */

#define DPY_TENSOR_MT "dpy.Tensor"
#define DPY_MODULE_MT "dpy.Module"
#define DPY_OPTIM_MT "dpy.Optimizer"
#define DPY_GENERATOR_MT "dpy.Generator"

#define DPY_TF_READONLY 1u   /* shared (the dataset, bytes other nodes read): in-place ops refuse */
#define DPY_TF_SENDABLE 2u   /* exactly a dpy_fabric_buffer: sent without a copy, read-only after */

/* counted: what the box added to its state's tensor_live (dpy_tensor_filled), taken back when freed */
typedef struct { dpy_tensor *h; unsigned flags; size_t counted; } dpy_tensor_box;

dpy_tensor *dpy_checktensor(lua_State *L, int arg);
dpy_tensor *dpy_testtensor(lua_State *L, int arg);
/* Pushes an empty box; fill box->h from a shim call, then call dpy_tensor_filled. */
dpy_tensor_box *dpy_newtensor(lua_State *L);
/* Accounts a filled box (GC nudge, peak bytes); call right after the shim succeeded. */
void dpy_tensor_filled(lua_State *L, dpy_tensor_box *b);
/* Pushes a new 1-d cpu tensor of n elements of dtype (uninitialized) and returns its data. */
void *dpy_push_empty(lua_State *L, size_t n, dpy_dtype dtype);
/* Frees the tensor of a temporary box (one a C function made for its own use, never accounted)
** as soon as it is done with it: left to the GC, it would keep its memory, and whatever storage
** it views, alive until a collection. */
void dpy_tensor_drop(dpy_tensor_box *b);
/* Raises "torch: <message>"; call only after the shim returned (no C++ frame, nothing held). */
int dpy_torch_error(lua_State *L);
/* For expected I/O failures: pushes true, or nil and the shim's message. Returns 1 or 2. */
int dpy_torch_result(lua_State *L, dpy_err e);

dpy_dtype dpy_checkdtype(lua_State *L, int arg);
/* An optional {dtype=, device=} table or dtype string at arg. */
void dpy_optoptions(lua_State *L, int arg, dpy_dtype *dtype, const char **device);
/* A shape given as a table {2, 3} at arg, or as integers from arg on; returns ndim and sets
** *next to the first argument after the shape. */
int dpy_checkshape(lua_State *L, int arg, int64_t *shape, int *next);

dpy_generator *dpy_checkgenerator(lua_State *L, int arg);
/* The generator at arg if there is one, else the state's default generator (seeded by
** dpy.tensor.manual_seed). Never NULL. */
dpy_generator *dpy_optgenerator(lua_State *L, int arg);

struct dpy_module *dpy_checkmodule(lua_State *L, int arg);
/* Pushes the list of the module at arg's parameters for an optimizer, as m:parameters() but left
** on the values the process lends to layers drawn alike (the optimizer's first step copies those):
** a node's model is built on them, and shares the process's initial copy before it trains. */
int dpy_push_optimized_params(lua_State *L, int arg);

int luaopen_dpy_tensor_core(lua_State *L);
int luaopen_dpy_generator_core(lua_State *L);
int luaopen_dpy_nn_core(lua_State *L);
/* The process's nodes are built: it gives up its hold on their shared initial models (l_nn.c). */
void dpy_nn_forget_initial(void);
int luaopen_dpy_optim_core(lua_State *L);
int luaopen_dpy_data_core(lua_State *L);
int luaopen_dpy_host_core(lua_State *L);
/* The flag host.catch_interrupt's handler sets to the first signal's number (0: none yet). */
const atomic_int *dpy_host_interrupt_flag(void);
/* Clears that flag (a forked child starts without its parent's signal). */
void dpy_host_forget_interrupt(void);
int luaopen_dpy_nodes_core(lua_State *L);
int luaopen_dpy_codec_core(lua_State *L);
int luaopen_dpy_sparse_core(lua_State *L);
int luaopen_dpy_aggregate_core(lua_State *L);
int luaopen_dpy_ssh_core(lua_State *L);
int luaopen_dpy_crypto_core(lua_State *L);
int luaopen_dpy_attach_core(lua_State *L);

/* {==== child processes (spawn.c) ====} */

/* Called by main once the libraries are loaded: main_fn runs a command line as main does, on a
** fresh Lua state, in a child forked to run this program (dpy_spawn). */
void dpy_spawn_init(int argc, char **argv, int (*main_fn)(int, char **));
/* What a child gets: stdout to the file out, stderr to err (NULL: out too), stdin from the file in
** (NULL: this process's), descriptor fd (>= 0) as its 3, the others this process holds staying
** here; it starts in dir (NULL: here). */
typedef struct {
    const char *out, *err, *dir, *in;
    int fd;
} dpy_spawn_io;
/* Starts argv[0] with io: 0 and *pid, or an errno and *what, the path it concerns (NULL: io's fd). */
int dpy_spawn(char *const argv[], const dpy_spawn_io *io, pid_t *pid, const char **what);
/* Ends the process without the libraries' exit handlers (stdio flushed; the sanitizer's leak
** check kept): see main.c. */
_Noreturn void dpy_exit(int code);

/* {==== the allocator (heap.c) ====} */

/* "jemalloc" when it is linked (every build but the sanitizers'), else "libc" (glibc's malloc,
** or the sanitizer's in its place). */
const char *dpy_heap_allocator(void);
/* Gives freed memory back to the system (the allocator keeps it otherwise: see main.c). */
void dpy_heap_trim(void);
/* keep 1: gives back what was freed so far and from then on keeps freed pages for reuse (no
** decay); keep 0: decays again as configured once every keep 1 has its keep 0. Nothing under glibc. */
void dpy_heap_keep_freed(int keep);
/* Whether freed pages are kept now (a keep 1 without its keep 0). */
int dpy_heap_keeps_freed(void);
/* What freed pages do when no keep 1 holds: stay for reuse (a script's or the REPL's: no decay),
** or go back after the decay malloc_conf sets (a run's process: what its nodes' start freed); a
** dirty_decay_ms in the environment's MALLOC_CONF holds for both. For every arena, made or to be
** made; a command's start (it forgets the keep 1s of the process it was forked from). Nothing
** under glibc. */
void dpy_heap_decay_by_default(int decay);
/* How long freed pages stay before they go back, in ms, into *ms (-1: kept); 0, or -1 under glibc. */
int dpy_heap_decay_ms(long *ms);
/* A new jemalloc arena's index, or -1 (glibc's malloc, or a failure). */
int dpy_heap_new_arena(void);
/* Makes the calling thread allocate from that arena (-1: nothing changes). */
void dpy_heap_use_arena(int index);
/* Whether the process takes transparent huge pages from now on (0: 4 KiB pages, less memory
** beside what is used), once no start of nodes goes on; 0, or -1 when the kernel refused. */
int dpy_heap_huge_pages(int on);
/* A start of nodes begins (1) or ends (0): while one goes on, the process takes 4 KiB pages
** (heap.c says why). One end too many changes nothing. */
void dpy_heap_start(int on);
/* The bytes of static TLS that every thread of the process gets at its start (the libraries loaded
** with the executable, and a reserve for dlopen), or -1 where glibc does not say. */
long dpy_heap_static_tls(void);
/* Gives the calling thread a cache of freed blocks (on) or returns the one it has, with the
** blocks in it, to its arena (off); nothing under glibc. */
void dpy_heap_thread_cache(int on);

#endif

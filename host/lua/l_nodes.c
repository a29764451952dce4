/*
** l_nodes.c: the nodes of one process. nodes.core.start(spec) opens the process's fabric and
** starts one thread per node, each with its own Lua state running require("dpy.node").main(ep,
** args); it returns a dpy.NodeGroup to wait on. Each node state gets a dpy.Endpoint: its uid's
** view of the fabric (send, recv, traffic) and of the process's compute slots, a semaphore that
** bounds how many nodes compute at once. Only copies cross between states: strings and bytes.
*/
#define _GNU_SOURCE   /* CPU affinity */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "attach.h"
#include "auth.h"
#include "fabric.h"
#include "dpy_lua.h"

#define GROUP_MT "dpy.NodeGroup"
#define ENDPOINT_MT "dpy.Endpoint"
#define NODE_STACK ((size_t)2 << 20)
#define NODE_GC_PAUSE 120   /* release_memory: a collection starts at 120 % of the last one's heap (Lua: 200) */

typedef struct group group;

typedef struct {
    group *g;
    uint32_t uid;
    int held;                       /* holds a compute slot */
    int slot;                       /* which one, while held */
    int granted;                    /* given a slot by a releaser while it waited */
    int64_t priority;               /* lower first: (round, rank) of the waiting node */
    int32_t rank;                   /* its place in the slots' order in a round (default: uid) */
    pthread_cond_t slot_cv;
    int ok;                         /* finished without error */
    char *err;                      /* malloc'd message when !ok */
    int round;                      /* last round reported */
    lua_State *L;                   /* the node's state while it runs (under the group's mu) */
    double accuracy;                /* last reported test accuracy (NaN: none) */
    pthread_t thread;
    int started;
    int built;                      /* its first slot (its build) is over (under the group's mu) */
} node_ctx;

struct group {
    dpy_fabric *fabric;
    int processes;                  /* the run's */
    int threads;                    /* libtorch intra-op threads of each node thread */
    int free_slots;                 /* compute slots, handed out lowest round first (under mu) */
    unsigned char *slot_busy;       /* per slot */
    int pin;                        /* run each slot on its own core */
    int cpus[CPU_SETSIZE], ncpus;   /* the process's CPUs, as it started */
    int cpu_offset;                 /* this process's first slot's CPU in the list */
    int *slot_arena;                /* per slot: the jemalloc arena its nodes allocate from */
    node_ctx *nodes;
    size_t count;
    node_ctx **waiting;             /* the nodes waiting for a slot, a heap by (priority, index) */
    size_t nwaiting;                /* (under mu) */
    char **args;                    /* key=value strings handed to every node */
    size_t nargs;
    pthread_mutex_t mu;             /* guards running, and the nodes' report fields */
    pthread_cond_t done;
    size_t running;
    int joined;
    int interrupted;                /* g:interrupt(): the nodes stop (under mu) */
    int keep_freed;                 /* once every node is built, freed memory is kept for reuse */
    int keeping;                    /* it is (under mu) */
    int holds_start;                /* its start holds (start_hold; under mu) */
    size_t built;                   /* nodes whose build is over (under mu) */
    size_t unbuilt;                 /* nodes to start whose build is not over (under mu) */
    dpy_attach *attach;             /* the process's control socket (dpy-lua attach), or NULL */
    char *attach_error;             /* why it could not listen (malloc'd), or NULL */
};

typedef struct { group *g; node_ctx *node; } endpoint_box;
typedef struct { group *g; } group_box;

/* {==== the node threads ====} */

static char *dupstr(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/*
** Slot k runs on one core: the process's (k + offset)-th CPU, the offset spreading processes that
** share a machine. Left to the kernel, the thread of a node given a slot was often queued behind
** the other slot's thread while a core idled, and node threads moved between cores with their
** caches cold: 16 nodes at one local step per round took 1.4x the compute floor, 1.15x pinned
** (bench/decentralized). A waiting node is pinned by the node that hands it the slot, before
** the wake, so it wakes on that core rather than on the other and then moves; a node that releases
** its slot stays on the core, where it mostly sleeps. Best effort: a failure (a CPU set changed
** under the process) leaves the thread where it is.
** A node also allocates from its slot's own jemalloc arena: the buffers libtorch frees and takes
** again every step stay on that core, and the process keeps one set of them per slot, not one
** per arena jemalloc spreads the node threads over.
*/
static void run_on_slot(group *g, pthread_t thread, int slot) {
    if (!g->pin)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(g->cpus[(slot + g->cpu_offset) % g->ncpus], &set);
    pthread_setaffinity_np(thread, sizeof set, &set);
}

/*
** Compute slots. Synchronous rounds are a dependency graph: a node that is a round behind holds
** up its neighbours. So a free slot goes to the waiting node with the lowest (round, rank), the
** critical path first, not to whichever thread the scheduler wakes. The rank is the node's place
** in the launcher's order (graph.frontier_order: fewer models alive at once), else its uid.
** Caller holds g->mu.
*/
static int before(const node_ctx *a, const node_ctx *b) {   /* ties: the lower index, as a scan */
    return a->priority < b->priority || (a->priority == b->priority && a < b);
}

/* The waiters are a binary heap: a scan of every node at every hand-off (of the builds and of
** every round) was 1 % of the start's CPU time at 8192 nodes. */
static void wait_push(group *g, node_ctx *n) {
    size_t i = g->nwaiting++;
    while (i > 0 && before(n, g->waiting[(i - 1) / 2])) {
        g->waiting[i] = g->waiting[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    g->waiting[i] = n;
}

static node_ctx *wait_pop(group *g) {
    node_ctx *top = g->waiting[0], *last = g->waiting[--g->nwaiting];
    size_t i = 0, c;
    while ((c = 2 * i + 1) < g->nwaiting) {
        if (c + 1 < g->nwaiting && before(g->waiting[c + 1], g->waiting[c]))
            c++;
        if (!before(g->waiting[c], last))
            break;
        g->waiting[i] = g->waiting[c];
        i = c;
    }
    g->waiting[i] = last;
    return top;
}

/* A slot for round r is asked for with priority r * ROUND_PRIORITY + rank: builds (round 0) first.
** Past every rank (int32), so that no rank reads as a later round. */
#define ROUND_PRIORITY ((int64_t)1 << 32)
#define MAX_ROUND_ASKED ((int64_t)1 << 30)   /* a larger round asks as this one: no overflow */

/* Whether a request of this priority waits for the process's builds: a round's does until every
** node to start is built. The threads start one after another, and a slot given back while the
** next ones were still being created went to a built node's first training: with batch 32 those
** trainings put off the builds after them (8192 nodes: first round 13.7 s, 12.8 s held back). */
static int held_back(const group *g, int64_t priority) {
    return priority >= ROUND_PRIORITY && g->unbuilt > 0;
}

static void slot_release_locked(group *g, int slot) {
    if (g->nwaiting > 0 && !held_back(g, g->waiting[0]->priority)) {
        node_ctx *best = wait_pop(g);
        best->granted = 1;
        best->slot = slot;
        run_on_slot(g, best->thread, slot);   /* before the wake: it wakes on the slot's core */
        pthread_cond_signal(&best->slot_cv);
    } else {
        g->free_slots++;
        g->slot_busy[slot] = 0;
    }
}

/* Takes a free slot (under mu; free_slots > 0) and returns it. */
static int take_free_slot(group *g) {
    int slot = 0;
    while (g->slot_busy[slot])
        slot++;
    g->free_slots--;
    g->slot_busy[slot] = 1;
    return slot;
}

/* The last build over: the free slots go to the rounds held back meanwhile. */
static void unbuilt_less_locked(group *g) {
    if (--g->unbuilt > 0)
        return;
    while (g->free_slots > 0 && g->nwaiting > 0)
        slot_release_locked(g, take_free_slot(g));
}

/*
** A node thread has a cache of freed blocks only while it holds a slot: one that gives its slot
** back, or asks for one, returns its cache and the blocks in it to the arena. jemalloc keeps up to
** a few hundred KiB per thread, and with hundreds of node threads mostly asleep those caches were
** 0.7 MiB a node that nothing used; flushed, their empty slots still took 0.03 MiB a node
** (bench/decentralized scale). Unheld, a node allocates little (receiving, Lua), uncached.
*/
static void slot_acquire(node_ctx *n, int64_t priority) {
    group *g = n->g;
    dpy_heap_thread_cache(0);   /* what it freed unheld (receiving, Lua) goes back too: it may wait */
    pthread_mutex_lock(&g->mu);
    /* another waiter with a lower priority goes first */
    int ahead = g->nwaiting > 0 && g->waiting[0]->priority < priority;
    int at_once = g->free_slots > 0 && !ahead && !held_back(g, priority);
    if (at_once) {
        n->slot = take_free_slot(g);
    } else {
        n->granted = 0;
        n->priority = priority;
        wait_push(g, n);
        while (!n->granted)
            pthread_cond_wait(&n->slot_cv, &g->mu);
        n->granted = 0;
    }
    n->held = 1;
    pthread_mutex_unlock(&g->mu);
    if (at_once)   /* a slot handed over came with its core */
        run_on_slot(g, pthread_self(), n->slot);
    dpy_heap_use_arena(g->slot_arena[n->slot]);
    dpy_heap_thread_cache(1);
}

/* From its first thread to its last build, a start holds the modules' checks (chunks.c: its nodes
** load the same code) and the process's 4 KiB pages (heap.c: fresh huge pages may come far slower).
** Under mu once the group's threads run. */
static void start_hold(group *g, int on) {
    if (g->holds_start == on)
        return;
    g->holds_start = on;
    dpy_chunks_hold(on);
    dpy_heap_start(on);
}

/*
** Its nodes built, a process lets go of their shared initial model, gives back what their start
** freed and then keeps what the rounds free:
** each round frees and takes again the same buffers, and jemalloc's decay gave some back every
** round, pieces of huge pages at a time, taken again at a page fault each (kept: rounds of one
** step at 64 nodes take 0.80-0.89 of the time, at 1024 0.67-0.78, for 1-5 % more memory). Not
** with release_memory (keep_freed false). A node's first slot is its build (node_main), so its
** first release ends it. Under mu, so that a node that sees its rounds begin sees the change made.
*/
static void built_locked(group *g, node_ctx *n) {
    if (n->built)
        return;
    n->built = 1;
    if (g->unbuilt > 0)   /* none in an attached node's group */
        unbuilt_less_locked(g);
    if (++g->built < g->count)
        return;
    start_hold(g, 0);   /* the start is over: modules checked at each load, pages as asked */
    dpy_nn_forget_initial();   /* the last node that shares the initial model frees it */
    if (g->keep_freed && !g->keeping) {
        g->keeping = 1;
        dpy_heap_keep_freed(1);
    }
}

static void slot_release(node_ctx *n) {
    if (n->held)   /* only the node's own thread changes held */
        dpy_heap_thread_cache(0);
    pthread_mutex_lock(&n->g->mu);
    if (n->held) {
        n->held = 0;
        slot_release_locked(n->g, n->slot);
        built_locked(n->g, n);
    }
    pthread_mutex_unlock(&n->g->mu);
}

static void finish(node_ctx *n, const char *err) {
    group *g = n->g;
    dpy_attach_done(g->attach, (size_t)(n - g->nodes));
    dpy_fabric_node_gone(g->fabric, n->uid, err);
    slot_release(n);
    pthread_mutex_lock(&g->mu);
    n->ok = err == NULL;
    n->err = err ? dupstr(err) : NULL;
    g->running--;
    pthread_cond_broadcast(&g->done);
    pthread_mutex_unlock(&g->mu);
}

static void push_endpoint(lua_State *L, node_ctx *n) {
    endpoint_box *b = lua_newuserdatauv(L, sizeof *b, 1);   /* user value: the group, if owned */
    b->g = n->g;
    b->node = n;
    luaL_setmetatable(L, ENDPOINT_MT);
}

/* Runs in the node's own state: require("dpy.node").main(endpoint, args). */
static int node_boot(lua_State *L) {
    node_ctx *n = lua_touserdata(L, 1);
    lua_getglobal(L, "require");
    lua_pushstring(L, "dpy.nodes.core");   /* registers the Endpoint type in this state */
    lua_call(L, 1, 0);
    lua_getglobal(L, "require");
    lua_pushstring(L, "dpy.node");
    lua_call(L, 1, 1);
    lua_getfield(L, -1, "main");
    push_endpoint(L, n);
    lua_createtable(L, 0, (int)n->g->nargs);
    for (size_t i = 0; i < n->g->nargs; i++) {
        const char *kv = n->g->args[i];
        const char *eq = strchr(kv, '=');
        lua_pushlstring(L, kv, (size_t)(eq - kv));
        lua_pushstring(L, eq + 1);
        lua_rawset(L, -3);
    }
    lua_call(L, 2, 0);
    return 0;
}

/* The interrupt reaches a node on its own thread, as lua.c's does from a signal handler: Lua's
** lua_sethook marks every call frame of the state, a walk that races with the node's own calls
** and returns (its collector frees spare frames) when another thread makes it. g:interrupt sends
** NODE_INTERRUPT to each node thread, whose handler hooks the state this thread runs. A standard
** signal, not a real-time one: those queue, and past the user's limit on queued signals (ulimit -i)
** a send fails; this one is pending once at most, and nothing here asks for it otherwise (no socket
** has an owner for out-of-band data). */
#define NODE_INTERRUPT SIGURG
/* (libdpy-lua.so is loaded with dlopen: its thread-locals are allocated at a thread's first use of
** them, which must not be in a signal handler; a node thread sets this before any interrupt is sent) */
static _Thread_local lua_State *t_node_state;

static void on_node_interrupt(int sig) {
    (void)sig;
    if (t_node_state)
        dpy_state_interrupt(t_node_state);
}

static void catch_node_interrupt(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_node_interrupt;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(NODE_INTERRUPT, &sa, NULL);
}

static void *node_main(void *arg) {
    node_ctx *n = arg;
    /* OpenMP's thread count is per thread: a new thread starts from the default (every core),
    ** so each node thread sets its own, or every node would run a team of its own */
    dpy_torch_set_threads(n->g->threads);
    /* building the node is compute too: in a slot, as "round 0", so that a few nodes build at a
    ** time instead of thousands of threads at once fighting for the cores and the page-fault lock,
    ** and all are built before any trains (dpy.node gives the slot back once the node is ready) */
    slot_acquire(n, n->rank);
    pthread_mutex_lock(&n->g->mu);
    int interrupted = n->g->interrupted;   /* Ctrl-C while it waited: nothing to build */
    pthread_mutex_unlock(&n->g->mu);
    if (interrupted) {
        finish(n, "interrupted!");
        return NULL;
    }
    dpy_state st;
    memset(&st, 0, sizeof st);
    st.uid = (int)n->uid;
    char err[1024];
    lua_State *L = dpy_state_open(&st, dpy_lua_dir(), err, sizeof err);
    if (!L) {
        finish(n, err);
        return NULL;
    }
    /* a node's heap is mostly what it keeps (modules, its metrics): the default pause lets garbage
    ** grow it to twice that between collections, thousands of times over at thousands of nodes.
    ** With release_memory the collector runs sooner (rounds about 4 % slower at 64 nodes, 1 step) */
    if (!n->g->keep_freed)
        lua_gc(L, LUA_GCINC, NODE_GC_PAUSE, 0, 0);
    t_node_state = L;
    pthread_mutex_lock(&n->g->mu);
    n->L = L;
    if (n->g->interrupted)   /* it came before this node had a state to stop */
        dpy_state_interrupt(L);
    pthread_mutex_unlock(&n->g->mu);
    lua_pushcfunction(L, node_boot);
    lua_pushlightuserdata(L, n);
    int status = dpy_state_pcall(L, 1, 0);
    if (status != LUA_OK) {
        const char *msg = lua_tostring(L, -1);
        snprintf(err, sizeof err, "%s", msg ? msg : "(error object is not a string)");
    }
    pthread_mutex_lock(&n->g->mu);
    n->L = NULL;   /* no interrupt is sent to this thread from now on */
    pthread_mutex_unlock(&n->g->mu);
    t_node_state = NULL;   /* nor does one sent before hook the state as it closes */
    lua_close(L);
    finish(n, status == LUA_OK ? NULL : err);
    return NULL;
}

/* {==== dpy.NodeGroup ====} */

static void group_free(group *g) {
    if (!g)
        return;
    dpy_attach_close(g->attach);   /* the clients are told the process is done */
    free(g->attach_error);
    dpy_fabric_close(g->fabric);
    for (size_t i = 0; i < g->count; i++) {
        free(g->nodes[i].err);
        pthread_cond_destroy(&g->nodes[i].slot_cv);
    }
    for (size_t i = 0; i < g->nargs; i++)
        free(g->args[i]);
    free(g->args);
    free(g->nodes);
    free(g->waiting);
    free(g->slot_busy);
    free(g->slot_arena);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->done);
    free(g);
}

/* Waits for the node threads (once), then lets freed memory decay again (built_locked). */
static void join_all(group *g) {
    if (!g->joined) {
        for (size_t i = 0; i < g->count; i++)
            if (g->nodes[i].started)
                pthread_join(g->nodes[i].thread, NULL);
        g->joined = 1;
    }
    pthread_mutex_lock(&g->mu);
    int kept = g->keeping;
    g->keeping = 0;
    start_hold(g, 0);   /* a start that did not end: its nodes are gone */
    pthread_mutex_unlock(&g->mu);
    if (kept)
        dpy_heap_keep_freed(0);
}

static int int_field(lua_State *L, int t, const char *k, lua_Integer dflt) {
    lua_getfield(L, t, k);
    lua_Integer v = lua_isnil(L, -1) ? dflt : luaL_checkinteger(L, -1);
    lua_pop(L, 1);
    return (int)v;
}

static double num_field(lua_State *L, int t, const char *k, double dflt) {
    lua_getfield(L, t, k);
    double v = lua_isnil(L, -1) ? dflt : luaL_checknumber(L, -1);
    lua_pop(L, 1);
    return v;
}

/* A list field of integers into a fresh array of n entries (a userdata, freed by the GC). */
static int32_t *int_list(lua_State *L, int t, const char *k, size_t n) {
    int32_t *a = lua_newuserdatauv(L, (n ? n : 1) * sizeof *a, 0);
    lua_getfield(L, t, k);
    luaL_checktype(L, -1, LUA_TTABLE);
    if ((size_t)luaL_len(L, -1) != n)
        luaL_error(L, "nodes.start: '%s' needs %d entries", k, (int)n);
    for (size_t i = 0; i < n; i++) {
        lua_geti(L, -1, (lua_Integer)i + 1);
        a[i] = (int32_t)luaL_checkinteger(L, -1);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return a;
}

#ifndef PR_FUTEX_HASH   /* Linux 6.16's, newer than Debian 12's headers */
#define PR_FUTEX_HASH 78
#define PR_FUTEX_HASH_SET_SLOTS 1
#define PR_FUTEX_HASH_GET_SLOTS 2
#endif

/*
** Since Linux 6.16 a process's futexes hash into a table of its own, sized by its CPUs, not its
** threads: 16 buckets on 2 cores. Every node thread sleeps on futexes of its own (its slot's
** condition, its inbox), and a wake walks the chain of sleepers in its bucket: at 8192 nodes, 512
** of them (futex_wake was 5.7 % of the start's CPU time in perf, 0.03 % after). So a process that
** starts many nodes asks for 4 buckets a thread (the ratio the kernel applies to CPUs), a power of
** two; older kernels refuse the call, and nothing changes.
*/
static void futex_buckets_for(size_t threads) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus > 0 && threads <= (size_t)cpus)   /* the kernel's own size serves */
        return;
    unsigned long want = 16;
    while (want < 4 * threads && want < (1ul << 16))
        want <<= 1;
    int have = prctl(PR_FUTEX_HASH, PR_FUTEX_HASH_GET_SLOTS, 0, 0, 0);
    if (have >= 0 && (unsigned long)have < want)
        prctl(PR_FUTEX_HASH, PR_FUTEX_HASH_SET_SLOTS, want, 0, 0);
}

/*
** With attach = true and one uid, no thread starts: the second result is that node's endpoint,
** for a node driven from the calling state (the REPL).
** nodes.core.start{ nodes = N, process = p, processes = P, node_process = {uid -> p} (N entries),
**   uids = {local uids}, ranks = {their order in a round's slots} (default: uid),
**   addresses = {"host:port", ...} (P > 1), listen_fd (this process's, already listening), run_id,
**   max_payload, slots,
**   connect_timeout, threads (per node), drop, duplicate, corrupt, delay, fault_seed, latency, latency_max,
**   bandwidth, bandwidth_min,
**   key_file (P > 1: the run key, read here and never seen by Lua), encrypt, tcp_only, no_ring,
**   args = {key = value} }
** -> dpy.NodeGroup | nil, err
*/
static int n_start(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    dpy_fabric_opts o;
    memset(&o, 0, sizeof o);
    o.nodes = (uint32_t)int_field(L, 1, "nodes", 0);
    o.process = int_field(L, 1, "process", 0);
    o.processes = int_field(L, 1, "processes", 1);
    lua_getfield(L, 1, "run_id");   /* all 64 bits of it */
    o.run_id = lua_isnil(L, -1) ? 1 : (uint64_t)luaL_checkinteger(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, 1, "encrypt");
    o.encrypt = lua_toboolean(L, -1);
    lua_getfield(L, 1, "tcp_only");
    o.tcp_only = lua_toboolean(L, -1);
    lua_getfield(L, 1, "no_ring");
    o.no_ring = lua_toboolean(L, -1);
    lua_pop(L, 3);
    o.listener = (int)int_field(L, 1, "listen_fd", 0);   /* inherited, listening (dpy-lua node --listen-fd) */
    lua_getfield(L, 1, "key_file");
    const char *key_file = luaL_optstring(L, -1, NULL);
    lua_pop(L, 1);   /* the table keeps the string */
    o.max_payload = (uint32_t)num_field(L, 1, "max_payload", 1 << 30);
    o.connect_timeout = num_field(L, 1, "connect_timeout", 30);
    o.stop = dpy_host_interrupt_flag();   /* Ctrl-C or SIGTERM while it waits for its peers */
    o.drop = num_field(L, 1, "drop", 0);
    o.duplicate = num_field(L, 1, "duplicate", 0);
    o.corrupt = num_field(L, 1, "corrupt", 0);
    o.delay = num_field(L, 1, "delay", 0);
    o.latency = num_field(L, 1, "latency", 0);
    o.latency_max = num_field(L, 1, "latency_max", 0);
    o.bandwidth = num_field(L, 1, "bandwidth", 0);
    o.bandwidth_min = num_field(L, 1, "bandwidth_min", 0);
    o.fault_seed = (uint64_t)int_field(L, 1, "fault_seed", 1);
    int slots = int_field(L, 1, "slots", 1);
    int threads = int_field(L, 1, "threads", 1);
    lua_getfield(L, 1, "pin");
    int pin = lua_isnil(L, -1) || lua_toboolean(L, -1);
    lua_getfield(L, 1, "keep_freed");
    int keep_freed = lua_toboolean(L, -1);
    lua_pop(L, 2);
    luaL_argcheck(L, o.nodes > 0 && slots > 0, 1, "nodes and slots must be > 0");
    o.node_process = int_list(L, 1, "node_process", o.nodes);
    lua_getfield(L, 1, "uids");
    luaL_checktype(L, -1, LUA_TTABLE);
    size_t count = (size_t)luaL_len(L, -1);
    lua_pop(L, 1);
    int32_t *uids = int_list(L, 1, "uids", count);
    lua_getfield(L, 1, "ranks");
    int has_ranks = !lua_isnil(L, -1);
    lua_pop(L, 1);
    int32_t *ranks = has_ranks ? int_list(L, 1, "ranks", count) : NULL;   /* stays on the stack */
    const char **addresses = NULL;
    if (o.processes > 1) {
        addresses = lua_newuserdatauv(L, (size_t)o.processes * sizeof *addresses, 0);
        lua_getfield(L, 1, "addresses");
        luaL_checktype(L, -1, LUA_TTABLE);
        for (int i = 0; i < o.processes; i++) {
            lua_geti(L, -1, i + 1);
            addresses[i] = luaL_checkstring(L, -1);
            lua_pop(L, 1);   /* the list keeps the string */
        }
        o.addresses = addresses;
    }
    for (size_t i = 0; i < count; i++)
        if (uids[i] < 0 || (uint32_t)uids[i] >= o.nodes || o.node_process[uids[i]] != o.process)
            return luaL_error(L, "nodes.start: uid %d is not mapped to process %d", (int)uids[i], o.process);
    for (size_t i = 0; ranks && i < count; i++)
        if (ranks[i] < 0 || (uint32_t)ranks[i] >= o.nodes)
            return luaL_error(L, "nodes.start: rank %d is not in 0 .. %d", (int)ranks[i], (int)o.nodes - 1);
    lua_getfield(L, 1, "attach_socket");
    const char *attach_socket = luaL_optstring(L, -1, NULL);
    lua_pop(L, 1);   /* the table keeps the string */
    int paused = int_field(L, 1, "paused", -1);
    lua_getfield(L, 1, "attach");   /* a node driven from this state instead of a thread */
    int attach = !lua_isnil(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, 1, "args");
    int args = lua_gettop(L);
    group_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->g = NULL;
    luaL_setmetatable(L, GROUP_MT);
    /* from here on, nothing raises until the group is in its box */
    group *g = calloc(1, sizeof *g);
    if (!g)
        return luaL_error(L, "out of memory");
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->done, NULL);
    g->free_slots = slots;
    g->unbuilt = attach ? 0 : count;   /* an attached node is built by the state that drives it */
    g->slot_busy = calloc((size_t)slots, 1);
    g->slot_arena = calloc((size_t)slots, sizeof *g->slot_arena);
    for (int k = 0; k < slots && g->slot_arena; k++)   /* past 64 slots, arenas are shared */
        g->slot_arena[k] = k < 64 ? dpy_heap_new_arena() : g->slot_arena[k % 64];
    cpu_set_t cpuset;
    g->pin = pin && sched_getaffinity(0, sizeof cpuset, &cpuset) == 0;
    for (int c = 0; c < CPU_SETSIZE && g->pin; c++)
        if (CPU_ISSET(c, &cpuset))
            g->cpus[g->ncpus++] = c;
    /* only a process meant to fill its CPUs pins: two runs of one slot each would share a core */
    g->pin = g->pin && g->ncpus > 0 && slots >= g->ncpus;
    g->cpu_offset = g->pin ? (o.process * slots) % g->ncpus : 0;
    g->threads = threads > 0 ? threads : 1;
    g->keep_freed = keep_freed;
    g->nodes = calloc(count ? count : 1, sizeof *g->nodes);
    g->waiting = calloc(count ? count : 1, sizeof *g->waiting);
    size_t nargs = 0;
    if (lua_istable(L, args)) {
        lua_pushnil(L);
        while (lua_next(L, args)) {
            nargs++;
            lua_pop(L, 1);
        }
    }
    g->args = calloc(nargs ? nargs : 1, sizeof *g->args);
    box->g = g;
    if (!g->nodes || !g->waiting || !g->args || !g->slot_busy || !g->slot_arena)
        return luaL_error(L, "out of memory");
    if (nargs) {
        lua_pushnil(L);
        while (lua_next(L, args)) {
            lua_pushvalue(L, -2);
            const char *k = lua_tostring(L, -1), *v = lua_tostring(L, -2);
            if (k && v) {
                size_t len = strlen(k) + strlen(v) + 2;
                char *kv = malloc(len);
                if (kv) {
                    snprintf(kv, len, "%s=%s", k, v);
                    g->args[g->nargs++] = kv;
                }
            }
            lua_pop(L, 2);
        }
    }
    char err[512];
    uint8_t key[DPY_KEY_BYTES];
    if (key_file && dpy_key_load(key_file, key, err, sizeof err) != 0) {
        luaL_pushfail(L);
        lua_pushstring(L, err);
        return 2;
    }
    o.key = key_file ? key : NULL;
    g->processes = o.processes;
    int opened = dpy_fabric_open(&g->fabric, &o, err, sizeof err);
    memset(key, 0, sizeof key);   /* the fabric keeps its own copy */
    if (opened != 0) {
        luaL_pushfail(L);
        lua_pushstring(L, err);
        return 2;
    }
    g->count = count;
    if (attach_socket) {   /* the run goes on without it; g:progress() says why */
        uint32_t *u = lua_newuserdatauv(L, (count ? count : 1) * sizeof *u, 0);
        for (size_t i = 0; i < count; i++)
            u[i] = (uint32_t)uids[i];
        char aerr[512] = "";
        if (dpy_attach_open(&g->attach, attach_socket, u, count, aerr, sizeof aerr) != 0)
            g->attach_error = dupstr(aerr);
        else if (paused >= 0)   /* dpy-lua run --paused: no node starts a round past it */
            dpy_attach_limit(g->attach, paused);
        lua_pop(L, 1);
    }
    futex_buckets_for(count);
    catch_node_interrupt();
    if (!attach && count > 0)
        start_hold(g, 1);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, NODE_STACK);
    for (size_t i = 0; i < count; i++) {
        node_ctx *n = &g->nodes[i];
        n->g = g;
        n->uid = (uint32_t)uids[i];
        n->rank = ranks ? ranks[i] : uids[i];
        pthread_cond_init(&n->slot_cv, NULL);
        n->accuracy = NAN;
        n->round = -1;
        if (attach)
            continue;
        pthread_mutex_lock(&g->mu);
        g->running++;
        pthread_mutex_unlock(&g->mu);
        int e = pthread_create(&n->thread, &attr, node_main, n);
        if (e != 0) {
            char why[160];
            snprintf(why, sizeof why, "cannot start a thread for this node: %s%s", strerror(e),
                     e == EAGAIN ? " (the limit on threads: ulimit -u, or the cgroup's pids.max)" : "");
            finish(n, why);
            pthread_mutex_lock(&g->mu);
            built_locked(g, n);   /* no build to wait for */
            pthread_mutex_unlock(&g->mu);
            continue;
        }
        n->started = 1;
    }
    pthread_attr_destroy(&attr);
    lua_pushvalue(L, args + 1);   /* the box */
    if (attach && count == 1) {   /* and the attached node's endpoint, which keeps the group */
        push_endpoint(L, &g->nodes[0]);
        lua_pushvalue(L, args + 1);
        lua_setiuservalue(L, -2, 1);
        return 2;
    }
    return 1;
}

static group *checkgroup(lua_State *L, int arg) {
    group_box *b = luaL_checkudata(L, arg, GROUP_MT);
    if (!b->g)
        luaL_argerror(L, arg, "use of a closed dpy.NodeGroup");
    return b->g;
}

/* g:wait([timeout]) -> true when every node has finished */
static int g_wait(lua_State *L) {
    group *g = checkgroup(L, 1);
    double timeout = luaL_optnumber(L, 2, -1);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double end = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + timeout;
    pthread_mutex_lock(&g->mu);
    while (g->running > 0) {
        if (timeout < 0) {
            pthread_cond_wait(&g->done, &g->mu);
            continue;
        }
        struct timespec dl = {.tv_sec = (time_t)end, .tv_nsec = (long)((end - (double)(time_t)end) * 1e9)};
        if (pthread_cond_timedwait(&g->done, &g->mu, &dl) == ETIMEDOUT)
            break;
    }
    int all = g->running == 0;
    pthread_mutex_unlock(&g->mu);
    if (all)
        join_all(g);
    lua_pushboolean(L, all);
    return 1;
}

/* g:results() -> { [uid] = true | error message } (finished nodes only) */
static int g_results(lua_State *L) {
    group *g = checkgroup(L, 1);
    lua_createtable(L, 0, (int)g->count);
    pthread_mutex_lock(&g->mu);
    for (size_t i = 0; i < g->count; i++) {
        node_ctx *n = &g->nodes[i];
        if (n->ok)
            lua_pushboolean(L, 1);
        else if (n->err)
            lua_pushstring(L, n->err);
        else
            continue;
        lua_rawseti(L, -2, n->uid);
    }
    pthread_mutex_unlock(&g->mu);
    return 1;
}

/* g:progress([apart]) -> { round = slowest node's round, accuracy = mean of the last reported,
** running = nodes still running, sent, received = payload + header bytes so far (those of node
** apart left out: a server's), rejected, rejected_by,
** links = {["q"] = "unix" | "tcp"} (several processes: how this one connected to process q), paused } */
static int g_progress(lua_State *L) {
    group *g = checkgroup(L, 1);
    lua_Integer apart = luaL_optinteger(L, 2, -1);
    int slowest = -1;
    double sum = 0;
    int n_acc = 0;
    uint64_t sent = 0, received = 0;
    pthread_mutex_lock(&g->mu);
    size_t running = g->running;
    for (size_t i = 0; i < g->count; i++) {
        node_ctx *n = &g->nodes[i];
        if (slowest < 0 || n->round < slowest)
            slowest = n->round;
        if (!isnan(n->accuracy)) {
            sum += n->accuracy;
            n_acc++;
        }
    }
    pthread_mutex_unlock(&g->mu);
    for (size_t i = 0; i < g->count; i++) {
        if ((lua_Integer)g->nodes[i].uid == apart)
            continue;
        dpy_traffic t;
        dpy_fabric_traffic(g->fabric, g->nodes[i].uid, DPY_MAX_CHANNELS, &t);
        sent += t.sent_payload + t.sent_header;
        received += t.recv_payload + t.recv_header;
    }
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, slowest);
    lua_setfield(L, -2, "round");
    lua_pushnumber(L, n_acc ? sum / n_acc : NAN);
    lua_setfield(L, -2, "accuracy");
    lua_pushinteger(L, (lua_Integer)running);
    lua_setfield(L, -2, "running");
    lua_pushinteger(L, (lua_Integer)sent);
    lua_setfield(L, -2, "sent");
    lua_pushinteger(L, (lua_Integer)received);
    lua_setfield(L, -2, "received");
    char last[320];
    lua_pushinteger(L, (lua_Integer)dpy_fabric_rejected(g->fabric, last, sizeof last));
    lua_setfield(L, -2, "rejected");
    uint64_t by[DPY_REJECT_KINDS];
    dpy_fabric_rejected_by(g->fabric, by);
    lua_createtable(L, 0, DPY_REJECT_KINDS);
    for (int k = 0; k < DPY_REJECT_KINDS; k++) {
        lua_pushinteger(L, (lua_Integer)by[k]);
        lua_setfield(L, -2, dpy_reject_names[k]);
    }
    lua_setfield(L, -2, "rejected_by");
    if (g->processes > 1) {   /* how this process connected to each other one, kept after it is gone,
                                 ** and the bytes it sent each through shared memory */
        lua_createtable(L, 0, g->processes - 1);
        lua_createtable(L, 0, g->processes - 1);
        for (int p = 0; p < g->processes; p++) {
            const char *link = dpy_fabric_link(g->fabric, p);
            if (link) {
                char key[16];
                snprintf(key, sizeof key, "%d", p);   /* a string key: a JSON object */
                lua_pushstring(L, link);
                lua_setfield(L, -3, key);
                lua_pushinteger(L, (lua_Integer)dpy_fabric_shared_bytes(g->fabric, p));
                lua_setfield(L, -2, key);
            }
        }
        lua_setfield(L, -3, "shared_bytes");
        lua_setfield(L, -2, "links");
    }
    lua_pushboolean(L, dpy_attach_paused(g->attach));
    lua_setfield(L, -2, "paused");
    if (g->attach_error) {
        lua_pushstring(L, g->attach_error);
        lua_setfield(L, -2, "attach_error");
    }
    return 1;
}

/* g:interrupt(): stops every node at once: a node running Lua raises "interrupted!" at its next
** instruction, a wait for a message ends, and a node that catches the error stops at its next
** ep:report. Their finished rounds stay (dpy.node saves its metrics on the way out). */
static int g_interrupt(lua_State *L) {
    group *g = checkgroup(L, 1);
    pthread_mutex_lock(&g->mu);
    g->interrupted = 1;
    for (size_t i = 0; i < g->count; i++)
        if (g->nodes[i].L)   /* its thread runs until it has cleared L, under mu */
            pthread_kill(g->nodes[i].thread, NODE_INTERRUPT);
    pthread_mutex_unlock(&g->mu);
    dpy_fabric_interrupt(g->fabric);
    dpy_attach_stop(g->attach);   /* a node paused at a boundary stops too */
    return 0;
}

/* __gc and g:close(): waits for the nodes, then closes the fabric */
static int g_close(lua_State *L) {
    group_box *b = luaL_checkudata(L, 1, GROUP_MT);
    if (b->g) {
        pthread_mutex_lock(&b->g->mu);
        while (b->g->running > 0)
            pthread_cond_wait(&b->g->done, &b->g->mu);
        pthread_mutex_unlock(&b->g->mu);
        join_all(b->g);
        group_free(b->g);
        b->g = NULL;
    }
    return 0;
}

/* {==== dpy.Endpoint: a node's view of the fabric ====} */

static endpoint_box *checkep(lua_State *L, int arg) {
    return luaL_checkudata(L, arg, ENDPOINT_MT);
}

static uint32_t checkuid(lua_State *L, int arg) {
    lua_Integer u = luaL_checkinteger(L, arg);
    luaL_argcheck(L, u >= 0 && u <= UINT32_MAX, arg, "not a node uid");
    return (uint32_t)u;
}

/* ep:uid() -> integer */
static int e_uid(lua_State *L) {
    lua_pushinteger(L, checkep(L, 1)->node->uid);
    return 1;
}

/* ep:run(fn, ...) -> true | false, err with its traceback: calls fn(...) as the node's last work
** (dpy_state_pcall_last): from its end on, the run's interrupt no longer raises in this node, so
** that its last metrics and log line are written whole. */
static int e_run(lua_State *L) {
    checkep(L, 1);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    if (L != t_node_state)   /* the REPL's node, a coroutine: no interrupt of theirs to end */
        return luaL_error(L, "ep:run: only the node's own thread runs its rounds (dpy.node)");
    int status = dpy_state_pcall_last(L, lua_gettop(L) - 2, 0);
    lua_pushboolean(L, status == LUA_OK);
    if (status == LUA_OK)
        return 1;
    lua_insert(L, -2);
    return 2;
}

/* ep:send(to | {to, ...}, channel, round, tensor | string [, encoding]) -> true | nil, err
** Several receivers share one copy of the bytes; a tensor from model:get_flat() is that copy
** itself (no second one), and read-only once sent. encoding (a 32-bit id, 0 by default) names
** the transform chain that encoded them. */
static int e_send(lua_State *L) {
    endpoint_box *e = checkep(L, 1);
    lua_Integer channel = luaL_checkinteger(L, 3);
    lua_Integer round = luaL_checkinteger(L, 4);
    luaL_argcheck(L, channel >= 0 && channel < DPY_MAX_CHANNELS, 3, "channel out of range");
    luaL_argcheck(L, round >= 0 && round <= UINT32_MAX, 4, "round out of range");
    lua_Integer encoding = luaL_optinteger(L, 6, 0);
    luaL_argcheck(L, encoding >= 0 && encoding <= UINT32_MAX, 6, "encoding out of range");
    size_t n = lua_istable(L, 2) ? (size_t)luaL_len(L, 2) : 1;
    uint32_t *to = lua_newuserdatauv(L, (n ? n : 1) * sizeof *to, 0);
    if (lua_istable(L, 2)) {
        for (size_t i = 0; i < n; i++) {
            lua_geti(L, 2, (lua_Integer)i + 1);
            to[i] = checkuid(L, -1);
            lua_pop(L, 1);
        }
    } else {
        to[0] = checkuid(L, 2);
    }
    char err[320];
    int failed;
    dpy_tensor_box *given = luaL_testudata(L, 5, DPY_TENSOR_MT);
    if (given && given->h && (given->flags & DPY_TF_SENDABLE)) {
        given->flags = DPY_TF_READONLY;   /* local receivers read the buffer itself from now on */
        failed = dpy_fabric_send_buffer(e->g->fabric, e->node->uid, to, n, (uint16_t)channel,
                                        (uint32_t)round, (uint32_t)encoding,
                                        dpy_tensor_data(given->h), err, sizeof err) != 0;
    } else {
        const void *data;
        size_t len;
        dpy_tensor_box *c = NULL;   /* a contiguous cpu view of a tensor, freed once it is sent */
        if (lua_type(L, 5) == LUA_TSTRING) {
            data = lua_tolstring(L, 5, &len);
        } else {
            dpy_tensor *t = dpy_checktensor(L, 5);
            c = dpy_newtensor(L);
            if (dpy_tensor_cpu_contiguous(&c->h, t, 0, DPY_FLOAT32) != DPY_OK)
                return dpy_torch_error(L);
            data = dpy_tensor_data(c->h);
            len = dpy_tensor_nbytes(c->h);
        }
        failed = dpy_fabric_send_many(e->g->fabric, e->node->uid, to, n, (uint16_t)channel,
                                      (uint32_t)round, (uint32_t)encoding, data, len, err,
                                      sizeof err) != 0;
        if (c)
            dpy_tensor_drop(c);   /* the fabric copied the bytes */
    }
    if (failed) {
        luaL_pushfail(L);
        lua_pushstring(L, err);
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

/*
** ep:recv(from, channel, round [, timeout [, dtype]]) -> a read-only 1-d tensor of dtype over the
** received bytes (no copy), or a string when no dtype is given, and the sender's encoding
** | nil, "timeout" | nil, "dead" [, why: "" when it finished, else its error, when it said]
** | nil, "malformed", why (the message came but was rejected). A compute slot the node holds is
** given back first.
*/
static int e_recv(lua_State *L) {
    endpoint_box *e = checkep(L, 1);
    uint32_t from = checkuid(L, 2);
    lua_Integer channel = luaL_checkinteger(L, 3);
    lua_Integer round = luaL_checkinteger(L, 4);
    double timeout = luaL_optnumber(L, 5, -1);
    int as_tensor = !lua_isnoneornil(L, 6);
    dpy_dtype dtype = as_tensor ? dpy_checkdtype(L, 6) : DPY_UINT8;
    luaL_argcheck(L, channel >= 0 && channel < DPY_MAX_CHANNELS, 3, "channel out of range");
    dpy_tensor_box *b = as_tensor ? dpy_newtensor(L) : NULL;   /* before anything is held */
    /* a node never waits for a message holding a compute slot: the sender may need it */
    slot_release(e->node);
    void *data;
    size_t len;
    uint32_t encoding;
    dpy_recv_status s = dpy_fabric_recv(e->g->fabric, e->node->uid, from, (uint16_t)channel,
                                        (uint32_t)round, timeout, &data, &len, &encoding);
    if (s == DPY_RECV_MALFORMED) {
        luaL_pushfail(L);
        lua_pushliteral(L, "malformed");
        lua_pushlstring(L, data, len);   /* raises only when Lua is out of memory (data leaks then) */
        dpy_fabric_release(data);
        return 3;
    }
    if (s != DPY_RECV_OK) {
        char why[1024];
        int said = s == DPY_RECV_DEAD && dpy_fabric_gone_reason(e->g->fabric, from, why, sizeof why);
        luaL_pushfail(L);
        lua_pushstring(L, s == DPY_RECV_DEAD ? "dead" : "timeout");
        if (!said)
            return 2;
        lua_pushstring(L, why);
        return 3;
    }
    if (!as_tensor) {
        lua_pushlstring(L, data, len);   /* raises only when Lua is out of memory (data leaks then) */
        dpy_fabric_release(data);
        lua_pushinteger(L, encoding);
        return 2;
    }
    size_t es = dpy_dtype_size(dtype);
    if (len % es != 0) {
        dpy_fabric_release(data);
        luaL_pushfail(L);
        lua_pushliteral(L, "malformed");
        lua_pushfstring(L, "payload of %d bytes is not a whole number of %s", (int)len,
                        dpy_dtype_name(dtype));
        return 3;
    }
    int64_t shape[1] = {(int64_t)(len / es)};
    if (dpy_tensor_wrap(&b->h, data, len, dtype, shape, 1, dpy_fabric_release) != DPY_OK) {
        dpy_fabric_release(data);
        return dpy_torch_error(L);
    }
    b->flags = DPY_TF_READONLY;   /* other local receivers share these bytes */
    dpy_tensor_filled(L, b);
    lua_pushinteger(L, encoding);
    return 2;
}

/* ep:traffic([channel]) -> { sent_msgs, sent_payload, sent_header, recv_msgs, recv_payload,
** recv_header } (all channels when none is given) */
static int e_traffic(lua_State *L) {
    endpoint_box *e = checkep(L, 1);
    unsigned ch = lua_isnoneornil(L, 2) ? DPY_MAX_CHANNELS : (unsigned)luaL_checkinteger(L, 2);
    dpy_traffic t;
    dpy_fabric_traffic(e->g->fabric, e->node->uid, ch, &t);
    lua_createtable(L, 0, 6);
    const struct { const char *k; uint64_t v; } f[] = {
        {"sent_msgs", t.sent_msgs}, {"sent_payload", t.sent_payload}, {"sent_header", t.sent_header},
        {"recv_msgs", t.recv_msgs}, {"recv_payload", t.recv_payload}, {"recv_header", t.recv_header}};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) {
        lua_pushinteger(L, (lua_Integer)f[i].v);
        lua_setfield(L, -2, f[i].k);
    }
    return 1;
}

/* ep:rejected() -> count, last reason (this process's rejected packets) */
static int e_rejected(lua_State *L) {
    endpoint_box *e = checkep(L, 1);
    char last[320];
    lua_pushinteger(L, (lua_Integer)dpy_fabric_rejected(e->g->fabric, last, sizeof last));
    lua_pushstring(L, last);
    return 2;
}

/* ep:late(round) -> the messages of rounds before round discarded now, with those of finished
** rounds discarded before: the node's total of late messages (dpy_fabric_late) */
static int e_late(lua_State *L) {
    endpoint_box *e = checkep(L, 1);
    lua_Integer round = luaL_checkinteger(L, 2);
    luaL_argcheck(L, round >= 0 && round <= UINT32_MAX, 2, "a round in 0 .. 2^32 - 1 expected");
    lua_pushinteger(L, (lua_Integer)dpy_fabric_late(e->g->fabric, e->node->uid, (uint32_t)round));
    return 1;
}

/* ep:acquire([round]) / ep:release(): the process's compute slots (idempotent per node); the
** waiting node with the lowest round goes first */
static int e_acquire(lua_State *L) {
    endpoint_box *e = checkep(L, 1);
    lua_Integer asked = luaL_optinteger(L, 2, 0);
    int64_t round = asked < 0 ? 0 : asked > MAX_ROUND_ASKED ? MAX_ROUND_ASKED : (int64_t)asked;
    if (!e->node->held)
        slot_acquire(e->node, round * ROUND_PRIORITY + e->node->rank);
    return 0;
}

static int e_release(lua_State *L) {
    slot_release(checkep(L, 1)->node);
    return 0;
}

/* ep:slots_waiting() -> how many of the process's nodes wait for a compute slot now */
static int e_slots_waiting(lua_State *L) {
    group *g = checkep(L, 1)->g;
    pthread_mutex_lock(&g->mu);
    lua_Integer n = (lua_Integer)g->nwaiting;
    pthread_mutex_unlock(&g->mu);
    lua_pushinteger(L, n);
    return 1;
}

/* ep:report(round [, accuracy]): progress for the launcher's bar */
static int e_report(lua_State *L) {
    endpoint_box *e = checkep(L, 1);
    int round = (int)luaL_checkinteger(L, 2);
    double acc = luaL_optnumber(L, 3, NAN);
    pthread_mutex_lock(&e->g->mu);
    int interrupted = e->g->interrupted;
    if (!interrupted) {   /* an interrupted round is not finished */
        e->node->round = round;
        if (!isnan(acc))
            e->node->accuracy = acc;
    }
    pthread_mutex_unlock(&e->g->mu);
    if (interrupted)
        return luaL_error(L, "interrupted!");
    return 0;
}

/* {==== the control socket's side of a node (dpy.attach.node) ====} */

static size_t node_index(endpoint_box *e) {
    return (size_t)(e->node - e->g->nodes);
}

/* conn, id, code, kind ("E" or "C") of a request taken, or nothing */
static int push_request(lua_State *L, dpy_attach_request *r) {
    lua_pushinteger(L, r->conn);
    lua_pushinteger(L, r->id);
    lua_pushlstring(L, r->code, r->len);   /* raises only when Lua is out of memory (code leaks then) */
    lua_pushlstring(L, &r->kind, 1);
    dpy_attach_request_free(r);
    return 4;
}

/* ep:attach_wait(next_round) -> conn, id, code | nothing (start the round); blocks while the run
** is paused, with no compute slot held; raises "interrupted!" when the process stops */
static int e_attach_wait(lua_State *L) {
    endpoint_box *e = checkep(L, 1);
    int round = (int)luaL_checkinteger(L, 2);
    if (!e->g->attach)
        return 0;
    dpy_attach_request r;
    int got = dpy_attach_boundary(e->g->attach, node_index(e), round, &r, 0);
    if (got == 2) {   /* paused: no compute slot held while the others finish their round */
        slot_release(e->node);
        got = dpy_attach_boundary(e->g->attach, node_index(e), round, &r, 1);
    }
    if (got < 0)
        return luaL_error(L, "interrupted!");
    return got ? push_request(L, &r) : 0;
}

/* ep:attach_poll() -> conn, id, code | nothing: a request queued for this node, between events */
static int e_attach_poll(lua_State *L) {
    endpoint_box *e = checkep(L, 1);
    dpy_attach_request r;
    return dpy_attach_poll(e->g->attach, node_index(e), &r) ? push_request(L, &r) : 0;
}

/* ep:attach_send(conn, type, id, text) -> whether the client is still there [, why it is not: one
** that read the frame too slowly, whose session was closed] */
static int e_attach_send(lua_State *L) {
    endpoint_box *e = checkep(L, 1);
    lua_Integer conn = luaL_checkinteger(L, 2);
    const char *type = luaL_checkstring(L, 3);
    lua_Integer id = luaL_checkinteger(L, 4);
    size_t len;
    const char *text = luaL_optlstring(L, 5, "", &len);
    int rc = dpy_attach_send(e->g->attach, (uint32_t)conn, type[0], e->node->uid, (uint32_t)id, text, len);
    lua_pushboolean(L, rc == 0);
    if (rc != -2)
        return 1;
    char why[160];
    snprintf(why, sizeof why, "its client did not read a reply of %zu bytes within %g s (DPY_ATTACH_FRAME_SECONDS)",
             len, dpy_attach_frame_seconds(e->g->attach));
    lua_pushstring(L, why);
    return 2;
}

/* ep:attach_alive(conn) -> whether that client is still connected */
static int e_attach_alive(lua_State *L) {
    endpoint_box *e = checkep(L, 1);
    lua_pushboolean(L, dpy_attach_alive(e->g->attach, (uint32_t)luaL_checkinteger(L, 2)));
    return 1;
}

/* ep:attach_hold(conn): a breakpoint holds this process's nodes until conn's client sets a limit */
static int e_attach_hold(lua_State *L) {
    endpoint_box *e = checkep(L, 1);
    dpy_attach_hold(e->g->attach, (uint32_t)luaL_checkinteger(L, 2));
    return 0;
}

static _Thread_local struct { dpy_attach *a; size_t i; } t_eval;   /* the evaluation in hand */

static void cancel_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    if (dpy_attach_cancelled(t_eval.a, t_eval.i)) {
        lua_sethook(L, NULL, 0, 0);
        luaL_error(L, "interrupted");
    }
}

/* ep:attach_eval(conn, id, fn, ...) -> true, results... | false, error: fn called as pcall does,
** stopped by the client's interrupt of request id */
static int e_attach_eval(lua_State *L) {
    endpoint_box *e = checkep(L, 1);
    uint32_t conn = (uint32_t)luaL_checkinteger(L, 2), id = (uint32_t)luaL_checkinteger(L, 3);
    luaL_checktype(L, 4, LUA_TFUNCTION);
    group *g = e->g;
    dpy_attach_evaluating(g->attach, node_index(e), conn, id);
    t_eval.a = g->attach, t_eval.i = node_index(e);
    lua_sethook(L, cancel_hook, LUA_MASKCOUNT, 1000);
    int n = lua_gettop(L) - 4;
    int status = lua_pcall(L, n, LUA_MULTRET, 0);
    pthread_mutex_lock(&g->mu);
    lua_sethook(L, NULL, 0, 0);
    if (g->interrupted)   /* the run's own interrupt, come meanwhile, still stops the node */
        dpy_state_interrupt(L);
    pthread_mutex_unlock(&g->mu);
    dpy_attach_evaluating(g->attach, node_index(e), conn, 0);
    lua_pushboolean(L, status == LUA_OK);
    lua_replace(L, 3);   /* stack: ep, conn, ok, results... */
    return lua_gettop(L) - 2;
}

static int e_tostring(lua_State *L) {
    lua_pushfstring(L, "dpy.Endpoint(node %d)", (int)checkep(L, 1)->node->uid);
    return 1;
}

static const luaL_Reg ep_methods[] = {
    {"uid", e_uid}, {"send", e_send}, {"recv", e_recv}, {"traffic", e_traffic},
    {"rejected", e_rejected}, {"late", e_late}, {"acquire", e_acquire}, {"release", e_release},
    {"slots_waiting", e_slots_waiting}, {"report", e_report}, {"run", e_run},
    {"attach_wait", e_attach_wait}, {"attach_poll", e_attach_poll}, {"attach_send", e_attach_send},
    {"attach_hold", e_attach_hold}, {"attach_eval", e_attach_eval}, {"attach_alive", e_attach_alive},
    {NULL, NULL}};
static const luaL_Reg group_methods[] = {
    {"wait", g_wait}, {"results", g_results}, {"progress", g_progress}, {"interrupt", g_interrupt},
    {"close", g_close},
    {NULL, NULL}};
/* nodes.core.make_key(path) -> true | nil, err: a fresh random run key, mode 0600 */
static int n_make_key(lua_State *L) {
    char err[512];
    if (dpy_key_create(luaL_checkstring(L, 1), err, sizeof err) != 0) {
        luaL_pushfail(L);
        lua_pushstring(L, err);
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

static const luaL_Reg functions[] = {{"start", n_start}, {"make_key", n_make_key}, {NULL, NULL}};

static void newtype(lua_State *L, const char *name, const luaL_Reg *methods, lua_CFunction gc,
                    lua_CFunction tostring) {
    luaL_newmetatable(L, name);   /* stack: mt */
    if (gc) {
        lua_pushcfunction(L, gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, gc);
        lua_setfield(L, -2, "__close");
    }
    if (tostring) {
        lua_pushcfunction(L, tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_newtable(L);              /* stack: mt, methods */
    luaL_setfuncs(L, methods, 0);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
}

int luaopen_dpy_nodes_core(lua_State *L) {
    newtype(L, ENDPOINT_MT, ep_methods, NULL, e_tostring);
    newtype(L, GROUP_MT, group_methods, g_close, NULL);
    luaL_newlib(L, functions);
    return 1;
}

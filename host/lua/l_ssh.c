/*
** l_ssh.c: SSH sessions (libssh) for dispatch: dpy.ssh.core.
**   connect{host, port = 22, user, identity, known_hosts, accept_new = false, timeout = 10}
**     -> dpy.SSHSession | nil, message (every address host resolves to is tried in turn, each
**        for timeout seconds) (an unknown or changed host key is refused with its
**        fingerprint unless accept_new, which adds an unknown one — never a changed one)
**   s:exec(cmd [, timeout]) -> exit code, stdout, stderr        (runs to the end)
**   exec_all({ {s, cmd}, ... } [, timeout]) -> { {code, stdout, stderr} | {nil, why}, ... }: the
**     commands side by side (s:exec is one of them)
**   s:start(cmd) -> dpy.SSHChannel                              (runs in the background)
**   ch:poll() -> nil while it runs, else its exit code (-1: the connection dropped); output is
**     drained and its last 64 KiB kept: ch:output()
**   s:put(local, remote) / s:get(remote, local) -> true | nil, message   (SFTP)
**   s:forward_unix(local_path, remote_path) -> dpy.SSHForward | nil, message: a Unix socket here
**     whose clients are each joined to the Unix socket remote_path on the remote, through this
**     session (no port opened); fw:pump() moves what waits, both ways; fw:close()
**   s:close(), ch:close()
** One Lua state drives its sessions; libssh sessions are not shared between threads.
*/
#define _GNU_SOURCE   /* accept4 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <libssh/libssh.h>

#include "attach.h"
#include <libssh/sftp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "dpy_lua.h"

#define SESSION_MT "dpy.SSHSession"
#define CHANNEL_MT "dpy.SSHChannel"
#define FORWARD_MT "dpy.SSHForward"
#define FORWARD_LINKS 16
#define TAIL 65536

typedef struct { ssh_session s; sftp_session sftp; int fd; char name[300]; } session_box;   /* fd: ours, -1 */
typedef struct {
    ssh_channel ch;
    int code;                       /* exit code once finished; INT32_MIN while running */
    char tail[TAIL];                /* the last output bytes (stdout and stderr) */
    size_t len;
    int session_ref;                /* keeps the session alive while the channel is */
} channel_box;

static session_box *checksession(lua_State *L, int arg) {
    session_box *b = luaL_checkudata(L, arg, SESSION_MT);
    if (!b->s)
        luaL_error(L, "use of a closed dpy.SSHSession");
    return b;
}

static int fail(lua_State *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(lua_State *L, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    luaL_pushfail(L);
    lua_pushstring(L, msg);
    return 2;
}

static const char *opt_string(lua_State *L, int t, const char *k, const char *dflt) {
    lua_getfield(L, t, k);
    const char *v = lua_isnil(L, -1) ? dflt : luaL_checkstring(L, -1);
    lua_pop(L, 1);   /* the string stays alive in the options table */
    return v;
}

static lua_Integer opt_int(lua_State *L, int t, const char *k, lua_Integer dflt) {
    lua_getfield(L, t, k);
    lua_Integer v = lua_isnil(L, -1) ? dflt : luaL_checkinteger(L, -1);
    lua_pop(L, 1);
    return v;
}

static void session_free(session_box *b) {
    if (b->sftp)
        sftp_free(b->sftp);
    if (b->s) {
        ssh_disconnect(b->s);
        ssh_free(b->s);
    }
    if (b->fd >= 0)
        close(b->fd);   /* libssh leaves a socket given with SSH_OPTIONS_FD open */
    b->sftp = NULL;
    b->s = NULL;
    b->fd = -1;
}

/* The server key's SHA256 fingerprint, in OpenSSH's notation. */
static void fingerprint(ssh_session s, char *out, size_t len) {
    ssh_key key = NULL;
    unsigned char *hash = NULL;
    size_t hlen = 0;
    snprintf(out, len, "(unknown)");
    if (ssh_get_server_publickey(s, &key) == SSH_OK &&
        ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &hlen) == 0) {
        char *fp = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, hlen);
        if (fp) {
            snprintf(out, len, "%s", fp);
            ssh_string_free_char(fp);
        }
    }
    ssh_clean_pubkey_hash(&hash);
    ssh_key_free(key);
}

static int verify_host(lua_State *L, session_box *b, const char *known_hosts, int accept_new) {
    char fp[128];
    fingerprint(b->s, fp, sizeof fp);
    enum ssh_known_hosts_e k = ssh_session_is_known_server(b->s);
    switch (k) {
    case SSH_KNOWN_HOSTS_OK:
        return 0;
    case SSH_KNOWN_HOSTS_CHANGED:
    case SSH_KNOWN_HOSTS_OTHER:
        fail(L, "%s: the host key CHANGED (now %s) from the one in %s: refusing to connect (someone "
                "may be intercepting; if the key was replaced on purpose, remove the old line)",
             b->name, fp, known_hosts);
        return -1;
    case SSH_KNOWN_HOSTS_NOT_FOUND:
    case SSH_KNOWN_HOSTS_UNKNOWN:
        if (accept_new) {
            if (ssh_session_update_known_hosts(b->s) == SSH_OK)
                return 0;
            fail(L, "%s: cannot add its host key to %s: %s", b->name, known_hosts,
                 ssh_get_error(b->s));
            return -1;
        }
        fail(L, "%s: its host key %s is not in %s: refusing to connect (check the fingerprint, "
                "then add it with ssh-keyscan, or pass --accept-new-host-keys)",
             b->name, fp, known_hosts);
        return -1;
    default:
        fail(L, "%s: cannot check its host key against %s: %s", b->name, known_hosts,
             ssh_get_error(b->s));
        return -1;
    }
}

static int authenticate(lua_State *L, session_box *b, const char *identity) {
    int rc;
    if (identity) {
        ssh_key key = NULL;
        if (ssh_pki_import_privkey_file(identity, NULL, NULL, NULL, &key) != SSH_OK)
            return fail(L, "%s: cannot read the identity file %s", b->name, identity), -1;
        rc = ssh_userauth_publickey(b->s, NULL, key);
        ssh_key_free(key);
    } else {
        rc = ssh_userauth_publickey_auto(b->s, NULL, NULL);   /* the agent, then ~/.ssh/id_* */
    }
    if (rc == SSH_AUTH_SUCCESS)
        return 0;
    fail(L, "%s: authentication failed (%s%s)", b->name,
         identity ? "key " : "the agent and the default keys", identity ? identity : "");
    return -1;
}

/* One connect to ai within timeout seconds: the connected socket, or -1 with errno set. */
static int connect_one(const struct addrinfo *ai, long timeout) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0)
        return -1;
    int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        do
            rc = poll(&p, 1, (int)(timeout * 1000));
        while (rc < 0 && errno == EINTR);
        int soerr = 0;
        socklen_t len = sizeof soerr;
        if (rc == 0)
            soerr = ETIMEDOUT;
        else if (rc > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0)
            soerr = errno;
        rc = soerr ? -1 : 0;
        if (soerr)
            errno = soerr;
    }
    if (rc == 0 && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) == 0)
        return fd;
    int e = errno;
    close(fd);
    errno = e;
    return -1;
}

/* Connects to every address host resolves to, in getaddrinfo's order, as OpenSSH does (libssh
** alone tries the first one only: "localhost" as ::1 and 127.0.0.1 fails when the server listens
** on 127.0.0.1). Returns the socket, or -1 with why in err: each address tried and its error. */
static int connect_any(const char *host, int port, long timeout, char *err, size_t errlen) {
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    int rc = getaddrinfo(host, service, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "cannot resolve %s: %s", host, rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
        return -1;
    }
    size_t used = (size_t)snprintf(err, errlen, "cannot connect:");
    int fd = -1;
    for (const struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = connect_one(ai, timeout);
        if (fd >= 0)
            break;
        int e = errno;
        char addr[NI_MAXHOST] = "?";
        getnameinfo(ai->ai_addr, ai->ai_addrlen, addr, sizeof addr, NULL, 0, NI_NUMERICHOST);
        if (used < errlen)
            used += (size_t)snprintf(err + used, errlen - used, "%s %s%s%s:%d: %s", ai == res ? "" : ";",
                                     ai->ai_family == AF_INET6 ? "[" : "", addr,
                                     ai->ai_family == AF_INET6 ? "]" : "", port, strerror(e));
    }
    freeaddrinfo(res);
    return fd;
}

static int s_connect(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    const char *hostname = opt_string(L, 1, "host", NULL);
    luaL_argcheck(L, hostname != NULL, 1, "host is required");
    int port = (int)opt_int(L, 1, "port", 22);
    const char *user = opt_string(L, 1, "user", NULL);
    const char *identity = opt_string(L, 1, "identity", NULL);
    const char *known_hosts = opt_string(L, 1, "known_hosts", NULL);
    long timeout = (long)opt_int(L, 1, "timeout", 10);
    lua_getfield(L, 1, "accept_new");
    int accept_new = lua_toboolean(L, -1);
    lua_pop(L, 1);
    session_box *b = lua_newuserdatauv(L, sizeof *b, 0);
    memset(b, 0, sizeof *b);
    b->fd = -1;
    luaL_setmetatable(L, SESSION_MT);
    snprintf(b->name, sizeof b->name, "%s%s%s:%d", user ? user : "", user ? "@" : "", hostname,
             port);
    b->s = ssh_new();
    if (!b->s)
        return fail(L, "%s: out of memory", b->name);
    int verbosity = SSH_LOG_NOLOG;
    ssh_options_set(b->s, SSH_OPTIONS_HOST, hostname);
    ssh_options_set(b->s, SSH_OPTIONS_PORT, &port);
    ssh_options_set(b->s, SSH_OPTIONS_LOG_VERBOSITY, &verbosity);
    ssh_options_set(b->s, SSH_OPTIONS_TIMEOUT, &timeout);
    if (user)
        ssh_options_set(b->s, SSH_OPTIONS_USER, user);
    if (known_hosts)
        ssh_options_set(b->s, SSH_OPTIONS_KNOWNHOSTS, known_hosts);
    else
        known_hosts = "~/.ssh/known_hosts";
    char why[1024];
    b->fd = connect_any(hostname, port, timeout, why, sizeof why);
    if (b->fd < 0) {
        int r = fail(L, "%s: %s", b->name, why);
        session_free(b);
        return r;
    }
    ssh_options_set(b->s, SSH_OPTIONS_FD, &b->fd);   /* still ours: session_free closes it */
    if (ssh_connect(b->s) != SSH_OK) {
        int r = fail(L, "%s: cannot connect: %s", b->name, ssh_get_error(b->s));
        session_free(b);
        return r;
    }
    if (verify_host(L, b, known_hosts, accept_new) != 0 || authenticate(L, b, identity) != 0) {
        session_free(b);
        return 2;
    }
    return 1;
}

/* Appends n (< TAIL: one read) bytes to the channel's tail, keeping the last TAIL. */
static void keep(channel_box *c, const char *buf, size_t n) {
    if (c->len + n > TAIL) {
        size_t drop = c->len + n - TAIL;
        memmove(c->tail, c->tail + drop, c->len - drop);
        c->len -= drop;
    }
    memcpy(c->tail + c->len, buf, n);
    c->len += n;
}

/* A growing byte buffer for exec's outputs (capped: a runaway command cannot exhaust memory). */
typedef struct { char *p; size_t len, cap; } growbuf;

static void grow_add(growbuf *g, const char *buf, size_t n) {
    if (g->len + n > (16u << 20))
        return;
    if (g->len + n > g->cap) {
        size_t cap = (g->len + n) * 2;
        char *q = realloc(g->p, cap);
        if (!q)
            return;
        g->p = q, g->cap = cap;
    }
    memcpy(g->p + g->len, buf, n);
    g->len += n;
}

/* Reads what is available (waiting up to timeout_ms for stdout); returns 1 when the command has
** finished (c->code set). */
static int drain(channel_box *c, growbuf *out, growbuf *err, int timeout_ms) {
    char buf[16384];
    for (int stream = 0; stream < 2; stream++) {
        int n;
        while ((n = ssh_channel_read_timeout(c->ch, buf, sizeof buf, stream,
                                             stream ? 0 : timeout_ms)) > 0) {
            keep(c, buf, (size_t)n);
            growbuf *g = stream ? err : out;
            if (g)
                grow_add(g, buf, (size_t)n);
            timeout_ms = 0;
        }
        if (n == SSH_ERROR) {
            c->code = -1;
            return 1;
        }
    }
    if (ssh_channel_is_eof(c->ch) || ssh_channel_is_closed(c->ch)) {
        c->code = ssh_channel_get_exit_status(c->ch);
        return 1;
    }
    return 0;
}

static void chan_release(channel_box *c) {
    if (c->ch) {
        ssh_channel_close(c->ch);
        ssh_channel_free(c->ch);
        c->ch = NULL;
    }
}

/* Pushes a channel running cmd on session b (at stack index sess); when it cannot start, returns
** NULL with the message pushed above it. */
static channel_box *open_channel(lua_State *L, int sess, session_box *b, const char *cmd) {
    channel_box *c = lua_newuserdatauv(L, sizeof *c, 1);
    c->ch = NULL;
    c->code = INT32_MIN;
    c->len = 0;
    luaL_setmetatable(L, CHANNEL_MT);
    lua_pushvalue(L, sess);
    lua_setiuservalue(L, -2, 1);   /* the session outlives its channels */
    c->ch = ssh_channel_new(b->s);
    if (!c->ch || ssh_channel_open_session(c->ch) != SSH_OK ||
        ssh_channel_request_exec(c->ch, cmd) != SSH_OK) {
        chan_release(c);
        lua_pushfstring(L, "%s: cannot run a command: %s", b->name, ssh_get_error(b->s));
        return NULL;
    }
    return c;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Runs the n channels (channel k on session b[k]) to their ends or the deadline, side by side,
** looking at each at least once: done[k] once channel k finished (or was done before), its output
** in out[k] and err[k]. */
static void run_all(session_box **b, channel_box **c, growbuf *out, growbuf *err, int *done, int n,
                    double timeout) {
    double deadline = now() + timeout;
    struct pollfd fds[n];
    int left = n;
    for (int k = 0; k < n; k++)
        left -= done[k];
    for (int first = 1; left > 0 && (first || now() < deadline); first = 0) {
        int m = 0;
        for (int k = 0; k < n; k++) {
            if (done[k])
                continue;
            if ((done[k] = drain(c[k], &out[k], &err[k], 0))) {
                left--;
                continue;
            }
            fds[m++] = (struct pollfd){.fd = ssh_get_fd(b[k]->s), .events = POLLIN};
        }
        /* a read on one channel may have taken in another's data of the same session: a short nap */
        if (left > 0)
            poll(fds, (nfds_t)m, 20);
    }
}

/* Pushes the results of run_all's channel k: exit code, stdout, stderr, or nil and why. */
static int push_result(lua_State *L, session_box *b, channel_box *c, growbuf *out, growbuf *err,
                       int done, const char *cmd, double timeout) {
    int code = c->code;
    chan_release(c);
    int r;
    if (!done) {
        char why[1400];
        snprintf(why, sizeof why, "%s: '%.1000s' did not finish within %g s", b->name, cmd, timeout);
        lua_pushnil(L);
        lua_pushstring(L, why);
        r = 2;
    } else {
        lua_pushinteger(L, code);
        lua_pushlstring(L, out->p ? out->p : "", out->len);
        lua_pushlstring(L, err->p ? err->p : "", err->len);
        r = 3;
    }
    free(out->p), free(err->p);
    out->p = err->p = NULL;
    return r;
}

static int s_exec(lua_State *L) {
    session_box *b = checksession(L, 1);
    const char *cmd = luaL_checkstring(L, 2);
    double timeout = luaL_optnumber(L, 3, 60);
    channel_box *c = open_channel(L, 1, b, cmd);
    if (!c)
        return lua_error(L);
    growbuf out = {0}, err = {0};
    int done = 0;
    run_all(&b, &c, &out, &err, &done, 1, timeout);
    return push_result(L, b, c, &out, &err, done, cmd, timeout);
}

/* exec_all({ {session, cmd}, ... } [, timeout = 60]) -> { {code, stdout, stderr} | {nil, why}, ... }:
** the commands side by side (dispatch: one per remote, so that each remote's login costs once). */
static int l_exec_all(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    double timeout = luaL_optnumber(L, 2, 60);
    int n = (int)luaL_len(L, 1);
    luaL_argcheck(L, n >= 0 && n <= 1024, 1, "at most 1024 commands");
    if (n == 0) {
        lua_newtable(L);
        return 1;
    }
    luaL_checkstack(L, 4 * n + 8, "too many commands");   /* session, command, channel, why */
    session_box *b[n];
    channel_box *c[n];
    const char *cmd[n];
    int base = lua_gettop(L);
    for (int k = 0; k < n; k++) {   /* the commands and sessions stay referenced on the stack */
        lua_geti(L, 1, k + 1);
        luaL_argcheck(L, lua_istable(L, -1), 1, "{session, command} pairs expected");
        lua_geti(L, -1, 1);
        b[k] = luaL_testudata(L, -1, SESSION_MT);
        lua_geti(L, -2, 2);
        cmd[k] = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        luaL_argcheck(L, b[k] && cmd[k], 1, "{session, command} pairs expected");
        luaL_argcheck(L, b[k]->s, 1, "use of a closed dpy.SSHSession");
        lua_remove(L, -3);
    }
    int done[n], why[n];   /* why: the stack index of why command k could not start, else 0 */
    for (int k = 0; k < n; k++) {
        c[k] = open_channel(L, base + 2 * k + 1, b[k], cmd[k]);
        done[k] = why[k] = 0;
        if (!c[k]) {   /* the others still run: their remotes' results are not lost with it */
            c[k] = lua_touserdata(L, -2);
            done[k] = 1, why[k] = lua_gettop(L);
        }
    }
    growbuf out[n], err[n];
    memset(out, 0, sizeof out), memset(err, 0, sizeof err);
    run_all(b, c, out, err, done, n, timeout);
    lua_createtable(L, n, 0);
    for (int k = 0; k < n; k++) {
        int top = lua_gettop(L), r = 2;
        if (why[k]) {
            lua_pushnil(L);
            lua_pushvalue(L, why[k]);
        } else {
            r = push_result(L, b[k], c[k], &out[k], &err[k], done[k], cmd[k], timeout);
        }
        lua_createtable(L, r, 0);
        lua_insert(L, top + 1);
        for (int i = r; i >= 1; i--)
            lua_seti(L, top + 1, i);
        lua_seti(L, top, k + 1);
    }
    return 1;
}

static int s_start(lua_State *L) {
    session_box *b = checksession(L, 1);
    if (!open_channel(L, 1, b, luaL_checkstring(L, 2)))
        return lua_error(L);
    return 1;
}

static int c_poll(lua_State *L) {
    channel_box *c = luaL_checkudata(L, 1, CHANNEL_MT);
    lua_getiuservalue(L, 1, 1);
    session_box *b = luaL_testudata(L, -1, SESSION_MT);
    if (!b || !b->s)
        c->ch = NULL;   /* its session was closed */
    if (c->code == INT32_MIN && c->ch)
        drain(c, NULL, NULL, 0);
    if (c->code == INT32_MIN && !c->ch)
        c->code = -1;
    if (c->code == INT32_MIN)
        return 0;
    lua_pushinteger(L, c->code);
    return 1;
}

static int c_output(lua_State *L) {
    channel_box *c = luaL_checkudata(L, 1, CHANNEL_MT);
    lua_pushlstring(L, c->tail, c->len);
    return 1;
}

/* A closed session has freed its channels with it (ssh_free): then only forget the pointer. */
static int c_close(lua_State *L) {
    channel_box *c = luaL_checkudata(L, 1, CHANNEL_MT);
    lua_getiuservalue(L, 1, 1);
    session_box *b = luaL_testudata(L, -1, SESSION_MT);
    if (b && b->s)
        chan_release(c);
    c->ch = NULL;
    return 0;
}

static sftp_session sftp_of(lua_State *L, session_box *b) {
    if (!b->sftp) {
        b->sftp = sftp_new(b->s);
        if (!b->sftp || sftp_init(b->sftp) != SSH_OK) {
            if (b->sftp)
                sftp_free(b->sftp);
            b->sftp = NULL;
        }
    }
    (void)L;
    return b->sftp;
}

/* s:put(local, remote [, mode = 0644]) -> true | nil, message */
static int s_put(lua_State *L) {
    session_box *b = checksession(L, 1);
    const char *from = luaL_checkstring(L, 2), *to = luaL_checkstring(L, 3);
    int mode = (int)luaL_optinteger(L, 4, 0644);
    sftp_session sf = sftp_of(L, b);
    if (!sf)
        return fail(L, "%s: SFTP is not available: %s", b->name, ssh_get_error(b->s));
    FILE *in = fopen(from, "rb");
    if (!in)
        return fail(L, "cannot read %s", from);
    sftp_file out = sftp_open(sf, to, O_WRONLY | O_CREAT | O_TRUNC, (mode_t)mode);
    if (!out) {
        fclose(in);
        return fail(L, "%s: cannot write %s: %s", b->name, to, ssh_get_error(b->s));
    }
    char buf[32768];
    size_t n;
    int ok = 1;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0)
        ok = sftp_write(out, buf, n) == (ssize_t)n;
    ok = ok && !ferror(in);
    fclose(in);
    if (sftp_close(out) != SSH_OK)
        ok = 0;
    if (!ok)
        return fail(L, "%s: writing %s failed: %s", b->name, to, ssh_get_error(b->s));
    lua_pushboolean(L, 1);
    return 1;
}

/* s:get(remote, local) -> true | nil, message (written to local.part, then renamed) */
static int s_get(lua_State *L) {
    session_box *b = checksession(L, 1);
    const char *from = luaL_checkstring(L, 2), *to = luaL_checkstring(L, 3);
    sftp_session sf = sftp_of(L, b);
    if (!sf)
        return fail(L, "%s: SFTP is not available: %s", b->name, ssh_get_error(b->s));
    sftp_file in = sftp_open(sf, from, O_RDONLY, 0);
    if (!in)
        return fail(L, "%s: cannot read %s: %s", b->name, from, ssh_get_error(b->s));
    char part[4200];
    snprintf(part, sizeof part, "%s.part", to);
    FILE *out = fopen(part, "wb");
    if (!out) {
        sftp_close(in);
        return fail(L, "cannot write %s", part);
    }
    char buf[32768];
    ssize_t n;
    int ok = 1;
    while ((n = sftp_read(in, buf, sizeof buf)) > 0)
        ok = ok && fwrite(buf, 1, (size_t)n, out) == (size_t)n;
    ok = ok && n == 0;
    sftp_close(in);
    if (fclose(out) != 0)
        ok = 0;
    if (!ok || rename(part, to) != 0) {
        remove(part);
        return fail(L, "%s: copying %s to %s failed", b->name, from, to);
    }
    lua_pushboolean(L, 1);
    return 1;
}

static int s_close(lua_State *L) {
    session_free(luaL_checkudata(L, 1, SESSION_MT));
    return 0;
}

static int s_name(lua_State *L) {
    lua_pushstring(L, checksession(L, 1)->name);
    return 1;
}

/* {==== forwarding a Unix socket (dpy-lua attach to a dispatched run) ====} */

typedef struct {
    int listen_fd;
    char path[4096], real[108], remote[4096];
    struct { int fd; ssh_channel ch; } links[FORWARD_LINKS];
} forward_box;

static void unlink_one(forward_box *f, int k) {
    if (f->links[k].ch) {
        ssh_channel_close(f->links[k].ch);
        ssh_channel_free(f->links[k].ch);
    }
    if (f->links[k].fd >= 0)
        close(f->links[k].fd);
    f->links[k].fd = -1;
    f->links[k].ch = NULL;
}

static int s_forward_unix(lua_State *L) {
    checksession(L, 1);
    const char *local = luaL_checkstring(L, 2), *remote = luaL_checkstring(L, 3);
    forward_box *f = lua_newuserdatauv(L, sizeof *f, 1);
    memset(f, 0, sizeof *f);
    f->listen_fd = -1;
    for (int k = 0; k < FORWARD_LINKS; k++)
        f->links[k].fd = -1;
    luaL_setmetatable(L, FORWARD_MT);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1);   /* the session outlives its forwards */
    snprintf(f->path, sizeof f->path, "%s", local);
    snprintf(f->remote, sizeof f->remote, "%s", remote);
    char err[512];
    f->listen_fd = dpy_attach_listen(f->path, f->real, sizeof f->real, err, sizeof err);
    if (f->listen_fd < 0)
        return fail(L, "%s", err);
    fcntl(f->listen_fd, F_SETFL, O_NONBLOCK);
    return 1;
}

static forward_box *checkforward(lua_State *L, session_box **b) {
    forward_box *f = luaL_checkudata(L, 1, FORWARD_MT);
    lua_getiuservalue(L, 1, 1);
    *b = luaL_testudata(L, -1, SESSION_MT);
    lua_pop(L, 1);
    return f;
}

/* fw:pump() -> how many clients are joined: accepts, and moves what is waiting either way */
static int fw_pump(lua_State *L) {
    session_box *b;
    forward_box *f = checkforward(L, &b);
    if (f->listen_fd < 0 || !b || !b->s)
        return 0;
    int fd;
    while ((fd = accept4(f->listen_fd, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
        struct timeval tv = {.tv_sec = 2};   /* a client that stops reading is dropped, dispatch goes on */
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        int k = 0;
        while (k < FORWARD_LINKS && f->links[k].fd >= 0)
            k++;
        ssh_channel ch = k < FORWARD_LINKS ? ssh_channel_new(b->s) : NULL;
        if (!ch || ssh_channel_open_forward_unix(ch, f->remote, "127.0.0.1", 0) != SSH_OK) {
            if (ch)
                ssh_channel_free(ch);
            close(fd);   /* the client reads its end: the process does not answer */
            continue;
        }
        f->links[k].fd = fd, f->links[k].ch = ch;
    }
    char buf[65536];
    int joined = 0;
    for (int k = 0; k < FORWARD_LINKS; k++) {
        if (f->links[k].fd < 0)
            continue;
        int gone = 0;
        for (int moved = 1; moved && !gone;) {
            moved = 0;
            ssize_t n = recv(f->links[k].fd, buf, sizeof buf, MSG_DONTWAIT);
            if (n > 0) {
                gone = ssh_channel_write(f->links[k].ch, buf, (uint32_t)n) != n;
                moved = 1;
            } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                gone = 1;
            }
            int r = gone ? 0 : ssh_channel_read_nonblocking(f->links[k].ch, buf, sizeof buf, 0);
            if (r > 0) {
                for (ssize_t done = 0, w; done < r; done += w)
                    if ((w = send(f->links[k].fd, buf + done, (size_t)(r - done), MSG_NOSIGNAL)) <= 0) {
                        gone = 1;
                        break;
                    }
                moved = 1;
            } else if (r == SSH_ERROR || ssh_channel_is_eof(f->links[k].ch) || ssh_channel_is_closed(f->links[k].ch)) {
                gone = 1;
            }
        }
        if (gone)
            unlink_one(f, k);
        else
            joined++;
    }
    lua_pushinteger(L, joined);
    return 1;
}

static int fw_close(lua_State *L) {
    session_box *b;
    forward_box *f = checkforward(L, &b);
    for (int k = 0; k < FORWARD_LINKS; k++) {
        if (!b || !b->s)
            f->links[k].ch = NULL;   /* freed with its session */
        unlink_one(f, k);
    }
    if (f->listen_fd >= 0) {
        close(f->listen_fd);
        dpy_attach_unlisten(f->path, f->real);
        f->listen_fd = -1;
    }
    return 0;
}

static const luaL_Reg session_methods[] = {
    {"exec", s_exec}, {"start", s_start}, {"put", s_put}, {"get", s_get},
    {"forward_unix", s_forward_unix}, {"close", s_close}, {"name", s_name}, {NULL, NULL}};
static const luaL_Reg forward_methods[] = {{"pump", fw_pump}, {"close", fw_close}, {NULL, NULL}};
static const luaL_Reg channel_methods[] = {
    {"poll", c_poll}, {"output", c_output}, {"close", c_close}, {NULL, NULL}};
static const luaL_Reg functions[] = {{"connect", s_connect}, {"exec_all", l_exec_all}, {NULL, NULL}};

static void new_type(lua_State *L, const char *name, const luaL_Reg *methods, lua_CFunction gc) {
    luaL_newmetatable(L, name);
    lua_newtable(L);
    luaL_setfuncs(L, methods, 0);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, gc);
    lua_setfield(L, -2, "__close");
    lua_pop(L, 1);
}

int luaopen_dpy_ssh_core(lua_State *L) {
    new_type(L, SESSION_MT, session_methods, s_close);
    new_type(L, CHANNEL_MT, channel_methods, c_close);
    new_type(L, FORWARD_MT, forward_methods, fw_close);
    luaL_newlib(L, functions);
    return 1;
}

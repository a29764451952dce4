/*
** l_attach.c: the client's side of dpy-lua attach (dpy.attach.core): connections to the control
** sockets of a run's processes (frames as in attach.h), and a line editor that lets messages
** from the run print above the prompt while a person types (GNU readline's callback interface on
** a terminal; plain lines from a pipe otherwise).
**   connect(path) -> dpy.AttachConn | nil, err
**   c:send(type, uid, id [, payload]) -> true | nil, err
**   c:recv([timeout]) -> type, uid, id, payload | nil, "timeout" | nil, "closed"
**   c:close()
**   wait(conns, timeout [, input]) -> { indices of the conns with a frame; 0: a line typed }
**   editor_open(history_file | nil [, complete]), editor_prompt(prompt), editor_line() -> line | nil | false
**     (complete(text) -> { words }: what Tab offers)
**     (false: end of input), editor_print(text), editor_cancel(), editor_close()
**   interrupted() -> whether Ctrl-C came since the last call (caught while the editor is open)
*/
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <readline/history.h>
#include <readline/readline.h>

#include "attach.h"
#include "dpy_lua.h"

#define CONN_MT "dpy.AttachConn"
#define LINE_MAX_BYTES 65536

typedef struct {
    int fd;
    unsigned char *buf;   /* frames read but not yet taken */
    size_t have, cap;
} aconn;

/* {==== connections ====} */

static aconn *checkconn(lua_State *L, int arg) {
    aconn *c = luaL_checkudata(L, arg, CONN_MT);
    if (c->fd < 0)
        luaL_argerror(L, arg, "use of a closed connection");
    return c;
}

static int a_connect(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    char target[sizeof sa.sun_path];
    if (strlen(path) >= sizeof sa.sun_path) {   /* the process linked it from a short folder */
        ssize_t k = readlink(path, target, sizeof target - 1);
        if (k < 0) {
            luaL_pushfail(L);
            lua_pushfstring(L, "%s: %s", path, strerror(errno));
            return 2;
        }
        target[k] = '\0';
        path = target;
    }
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    aconn *c = lua_newuserdatauv(L, sizeof *c, 0);
    memset(c, 0, sizeof *c);
    c->fd = -1;
    luaL_setmetatable(L, CONN_MT);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        luaL_pushfail(L);
        lua_pushstring(L, strerror(e));
        return 2;
    }
    c->fd = fd;
    return 1;
}

static int c_send(lua_State *L) {
    aconn *c = checkconn(L, 1);
    const char *type = luaL_checkstring(L, 2);
    uint32_t uid = (uint32_t)luaL_checkinteger(L, 3), id = (uint32_t)luaL_checkinteger(L, 4);
    size_t len;
    const char *p = luaL_optlstring(L, 5, "", &len);
    luaL_argcheck(L, len <= DPY_ATTACH_MAX_PAYLOAD, 5, "payload too long");
    unsigned char h[DPY_ATTACH_HEADER];
    dpy_attach_header(h, (uint32_t)len, type[0], uid, id);
    struct iovec io[2] = {{h, sizeof h}, {(void *)p, len}};
    struct msghdr m = {.msg_iov = io, .msg_iovlen = 2};
    size_t total = sizeof h + len, done = 0;
    while (done < total) {
        ssize_t k = sendmsg(c->fd, &m, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            luaL_pushfail(L);
            lua_pushstring(L, strerror(errno));
            return 2;
        }
        done += (size_t)k;
        while (k > 0 && m.msg_iovlen > 0) {   /* skip what went */
            size_t step = (size_t)k < m.msg_iov[0].iov_len ? (size_t)k : m.msg_iov[0].iov_len;
            m.msg_iov[0].iov_base = (char *)m.msg_iov[0].iov_base + step;
            m.msg_iov[0].iov_len -= step;
            k -= (ssize_t)step;
            if (m.msg_iov[0].iov_len == 0)
                m.msg_iov++, m.msg_iovlen--;
        }
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* Whether a whole frame is buffered; its total length in *total. */
static int framed(const aconn *c, size_t *total) {
    if (c->have < DPY_ATTACH_HEADER)
        return 0;
    uint32_t len, uid, id;
    char type;
    dpy_attach_parse(c->buf, &len, &type, &uid, &id);
    *total = DPY_ATTACH_HEADER + len;
    return c->have >= *total;
}

/* Reads what the socket has: 1 read, 0 nothing, -1 closed */
static int fill(aconn *c) {
    if (c->cap - c->have < 65536) {
        size_t cap = c->cap ? c->cap * 2 : 131072;
        if (cap > 2 * (DPY_ATTACH_HEADER + DPY_ATTACH_MAX_PAYLOAD))
            return -1;   /* a frame longer than the protocol allows: not a run's process */
        unsigned char *b = realloc(c->buf, cap);
        if (!b)
            return -1;
        c->buf = b, c->cap = cap;
    }
    ssize_t k = recv(c->fd, c->buf + c->have, c->cap - c->have, MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (k <= 0)
        return -1;
    c->have += (size_t)k;
    return 1;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int c_recv(lua_State *L) {
    aconn *c = checkconn(L, 1);
    double timeout = luaL_optnumber(L, 2, -1), end = now() + timeout;
    size_t total;
    while (!framed(c, &total)) {
        double left = end - now();
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        int r = poll(&p, 1, timeout < 0 ? -1 : left > 0 ? (int)(left * 1000) + 1 : 0);
        if (r < 0 && errno == EINTR) {
            luaL_pushfail(L);
            lua_pushliteral(L, "timeout");   /* a signal: the caller looks at interrupted() */
            return 2;
        }
        if (r == 0) {
            luaL_pushfail(L);
            lua_pushliteral(L, "timeout");
            return 2;
        }
        if (fill(c) < 0) {
            luaL_pushfail(L);
            lua_pushliteral(L, "closed");
            return 2;
        }
    }
    uint32_t len, uid, id;
    char type;
    dpy_attach_parse(c->buf, &len, &type, &uid, &id);
    lua_pushlstring(L, &type, 1);
    lua_pushinteger(L, uid);
    lua_pushinteger(L, id);
    lua_pushlstring(L, (const char *)c->buf + DPY_ATTACH_HEADER, len);
    memmove(c->buf, c->buf + total, c->have - total);
    c->have -= total;
    return 4;
}

static int c_close(lua_State *L) {
    aconn *c = luaL_checkudata(L, 1, CONN_MT);
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    free(c->buf);
    c->buf = NULL;
    c->have = c->cap = 0;
    return 0;
}

/* {==== the line editor ====} */

#define QUEUE 64

static struct {
    int open, tty;
    char history[4096];
    char *lines[QUEUE];  /* lines typed, not yet taken (a ring) */
    size_t head, count;
    int eof;
    char pending[LINE_MAX_BYTES];   /* pipe mode: bytes read, not yet a line */
    size_t have;
    int skip;                       /* the rest of a line too long is dropped */
} ed;
static volatile sig_atomic_t g_sigint;

static void on_sigint(int sig) {
    (void)sig;
    g_sigint = 1;
}

/*
** The handler stays installed for the whole session (the terminal stays in readline's mode, so
** that nothing typed ahead is lost); the prompt is blank from Enter until the answer has come.
*/
static void on_line(char *line) {
    if (!line) {
        ed.eof = 1;
        rl_callback_handler_remove();
        return;
    }
    if (*line)
        add_history(line);
    rl_set_prompt("");
    if (ed.count == QUEUE) {
        free(line);   /* 64 lines typed ahead: the rest is dropped */
        return;
    }
    ed.lines[(ed.head + ed.count++) % QUEUE] = line;
}

static char *queued_line(void) {
    if (!ed.count)
        return NULL;
    char *line = ed.lines[ed.head];
    ed.head = (ed.head + 1) % QUEUE, ed.count--;
    return line;
}

/* A whole line in the pipe buffer, taken out; NULL if none. */
static char *pipe_line(void) {
    char *nl = memchr(ed.pending, '\n', ed.have);
    if (!nl && !(ed.eof && ed.have > 0))
        return NULL;
    size_t n = nl ? (size_t)(nl - ed.pending) : ed.have;
    char *s = malloc(n + 1);
    if (!s)
        return NULL;
    memcpy(s, ed.pending, n);
    s[n] = '\0';
    size_t used = nl ? n + 1 : n;
    memmove(ed.pending, ed.pending + used, ed.have - used);
    ed.have -= used;
    return s;
}

static int a_editor_open(lua_State *L) {
    const char *history = luaL_optstring(L, 1, NULL);
    memset(&ed, 0, sizeof ed);
    ed.open = 1;
    ed.tty = isatty(0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;   /* no SA_RESTART: a wait returns at once */
    sigaction(SIGINT, &sa, NULL);
    if (ed.tty) {
        rl_catch_signals = 0;
        if (history && snprintf(ed.history, sizeof ed.history, "%s", history) < (int)sizeof ed.history)
            read_history(ed.history);
        dpy_readline_complete(L, 2);
        rl_callback_handler_install("", on_line);
    }
    return 0;
}

static int a_editor_prompt(lua_State *L) {
    const char *prompt = luaL_checkstring(L, 1);
    if (ed.tty && !ed.eof) {
        rl_set_prompt(prompt);
        rl_forced_update_display();
    }
    return 0;
}

/* Reads what the terminal or pipe has; -> line | nil (none yet) | false (end of input) */
static int a_editor_line(lua_State *L) {
    char *line = NULL;
    if (ed.tty) {
        if (!ed.count && !ed.eof)
            rl_callback_read_char();
        line = queued_line();
    } else {
        line = pipe_line();
        if (!line && !ed.eof && ed.have < sizeof ed.pending) {
            ssize_t k = read(0, ed.pending + ed.have, sizeof ed.pending - ed.have);
            if (k == 0)
                ed.eof = 1;
            else if (k > 0)
                ed.have += (size_t)k;
            if (ed.skip) {   /* up to the end of the line too long */
                char *nl = memchr(ed.pending, '\n', ed.have);
                size_t used = nl ? (size_t)(nl - ed.pending) + 1 : ed.have;
                memmove(ed.pending, ed.pending + used, ed.have - used);
                ed.have -= used;
                ed.skip = !nl;
            }
            line = pipe_line();
            if (!line && ed.have == sizeof ed.pending) {   /* full, no line: it would never be read */
                fprintf(stderr, "dpy-lua attach: an input line longer than %d bytes, dropped\n", LINE_MAX_BYTES - 1);
                ed.have = 0, ed.skip = 1;
            }
        }
    }
    if (line) {
        lua_pushstring(L, line);
        free(line);
        return 1;
    }
    if (ed.eof && !ed.count)
        lua_pushboolean(L, 0);
    else
        lua_pushnil(L);
    return 1;
}

static int a_editor_print(lua_State *L) {
    size_t len;
    const char *text = luaL_checklstring(L, 1, &len);
    int shown = ed.tty && !ed.eof;
    if (shown) {   /* above the line being typed, which comes back as it was */
        rl_clear_visible_line();
    }
    fwrite(text, 1, len, stdout);
    if (len && text[len - 1] != '\n')
        fputc('\n', stdout);
    fflush(stdout);
    if (shown)
        rl_forced_update_display();
    return 0;
}

/* Ctrl-C at the prompt: the line typed is dropped, a fresh prompt follows */
static int a_editor_cancel(lua_State *L) {
    (void)L;
    if (ed.tty && !ed.eof) {
        rl_replace_line("", 0);
        rl_crlf();
        rl_on_new_line();
        rl_redisplay();
    }
    return 0;
}

static int a_editor_close(lua_State *L) {
    if (!ed.open)
        return 0;
    if (ed.tty) {
        dpy_readline_complete(L, 0);
        if (!ed.eof)
            rl_callback_handler_remove();
        if (ed.history[0])
            write_history(ed.history);
    }
    for (char *line; (line = queued_line());)
        free(line);
    ed.open = 0;
    signal(SIGINT, SIG_DFL);
    return 0;
}

static int a_interrupted(lua_State *L) {
    lua_pushboolean(L, g_sigint);
    g_sigint = 0;
    return 1;
}

/* wait(conns, timeout [, input]) -> { ready }: conns with a whole frame (or closed), and with
** input true, 0 for a line typed */
static int a_wait(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    double timeout = luaL_optnumber(L, 2, -1);
    int input = lua_toboolean(L, 3);
    int n = (int)luaL_len(L, 1);
    struct pollfd fds[64];
    aconn *cs[64];
    luaL_argcheck(L, n < 63, 1, "too many connections");
    lua_newtable(L);
    int ready = 0;
    for (int i = 0; i < n; i++) {
        lua_geti(L, 1, i + 1);
        cs[i] = luaL_testudata(L, -1, CONN_MT);
        lua_pop(L, 1);
        size_t total;
        if (cs[i] && cs[i]->fd >= 0 && framed(cs[i], &total)) {
            lua_pushinteger(L, i + 1);
            lua_rawseti(L, -2, ++ready);
        }
        fds[i] = (struct pollfd){.fd = cs[i] && cs[i]->fd >= 0 ? cs[i]->fd : -1, .events = POLLIN};
    }
    int with_input = input && ed.open && !ed.eof;
    if (input && ed.open && (ed.tty ? ed.count > 0 : memchr(ed.pending, '\n', ed.have) || ed.eof)) {
        lua_pushinteger(L, 0);   /* a line already buffered */
        lua_rawseti(L, -2, ++ready);
        with_input = 0;
    }
    if (ready)
        return 1;
    fds[n] = (struct pollfd){.fd = with_input ? 0 : -1, .events = POLLIN};
    int r = poll(fds, (nfds_t)n + 1, timeout < 0 ? -1 : (int)(timeout * 1000));
    if (r <= 0)
        return 1;   /* a timeout, or a signal: the caller looks at interrupted() */
    for (int i = 0; i < n; i++) {
        if (!fds[i].revents)
            continue;
        if (fill(cs[i]) < 0) {   /* closed: recv says so */
            lua_pushinteger(L, i + 1);
            lua_rawseti(L, -2, ++ready);
            continue;
        }
        size_t total;
        if (framed(cs[i], &total)) {
            lua_pushinteger(L, i + 1);
            lua_rawseti(L, -2, ++ready);
        }
    }
    if (fds[n].revents) {
        lua_pushinteger(L, 0);
        lua_rawseti(L, -2, ++ready);
    }
    return 1;
}

static const luaL_Reg conn_methods[] = {{"send", c_send}, {"recv", c_recv}, {"close", c_close}, {NULL, NULL}};
static const luaL_Reg functions[] = {
    {"connect", a_connect}, {"wait", a_wait}, {"interrupted", a_interrupted},
    {"editor_open", a_editor_open}, {"editor_prompt", a_editor_prompt}, {"editor_line", a_editor_line},
    {"editor_print", a_editor_print}, {"editor_cancel", a_editor_cancel}, {"editor_close", a_editor_close},
    {NULL, NULL}};

int luaopen_dpy_attach_core(lua_State *L) {
    luaL_newmetatable(L, CONN_MT);
    lua_pushcfunction(L, c_close);
    lua_setfield(L, -2, "__gc");
    lua_newtable(L);
    luaL_setfuncs(L, conn_methods, 0);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
    luaL_newlib(L, functions);
    return 1;
}

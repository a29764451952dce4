/* preload.c: registers the bindings in package.preload, in the manner of linit.c, and lua-cjson,
** linked in, so that no state searches the path for it. */
#include "dpy_lua.h"
#include <lua-cjson.h>

static const luaL_Reg BINDINGS[] = {
    {"dpy.tensor.core", luaopen_dpy_tensor_core},
    {"dpy.generator.core", luaopen_dpy_generator_core},
    {"dpy.nn.core", luaopen_dpy_nn_core},
    {"dpy.optim.core", luaopen_dpy_optim_core},
    {"dpy.data.core", luaopen_dpy_data_core},
    {"dpy.host.core", luaopen_dpy_host_core},
    {"dpy.nodes.core", luaopen_dpy_nodes_core},
    {"dpy.codec.core", luaopen_dpy_codec_core},
    {"dpy.sparse.core", luaopen_dpy_sparse_core},
    {"dpy.aggregate.core", luaopen_dpy_aggregate_core},
    {"dpy.ssh.core", luaopen_dpy_ssh_core},
    {"dpy.crypto.core", luaopen_dpy_crypto_core},
    {"dpy.attach.core", luaopen_dpy_attach_core},
    {"cjson", luaopen_cjson},
    {NULL, NULL}};

void dpy_preload_bindings(lua_State *L) {
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);   /* stack: preload */
    for (const luaL_Reg *b = BINDINGS; b->name; b++) {
        lua_pushcfunction(L, b->func);
        lua_setfield(L, -2, b->name);
    }
    lua_pop(L, 1);
}

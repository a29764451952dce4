--- Built-in action byzantine_attack: chosen nodes send an attack's vector instead of their model.
-- Options: attack = "sign_flip" or { "alie", z = ... } (see dpy.byzantine.attacks), nodes =
-- { uid, ... } or fraction = 0.2 (seeded), seed. A Byzantine node crafts its vector from what it
-- knows: its own honestly trained model and the models its neighbours sent it the round before;
-- n is the run's node count and f the number of Byzantine nodes. The uids go to the manifest
-- (actions.byzantine_attack.byzantine). D-PSGD runs. A checkpoint keeps what it saw and its
-- generator, so that a resumed run attacks as the uninterrupted one.
local registry = require "dpy.registry"
local actions = require "dpy.actions"
local tensor = require "dpy.tensor"

return registry.register {
  kind = "action",
  name = "byzantine_attack",
  options = {
    attack = { kind = "attack", default = "sign_flip", doc = "the attack: a name or { name, options }" },
    nodes = { type = "list", of = "integer", doc = "the Byzantine uids" },
    fraction = { type = "number", min = 0, max = 1, doc = "or a seeded fraction of the nodes" },
    seed = { type = "integer", doc = "the seed of that choice (the run's)" },
  },
  doc = "chosen nodes send an attack's vector (sign_flip, alie, inner_product, gaussian, mimic, infinity, nan)",
  validate = actions.validate_choice,
  manifest = function(opts, cfg) return { byzantine = actions.choose_nodes(opts, cfg, "byzantine_attack") } end,
  new = function(opts, node)
    local attacks = require "dpy.byzantine.attacks"
    local entry = opts.attack
    local name = registry.spec("attack", entry).name
    if not node.graph then error("byzantine_attack: runs with a gossip algorithm (dpsgd)", 0) end
    if not actions.is_chosen(opts, node, "byzantine_attack") then return {} end
    local f = #actions.choose_nodes(opts, node.cfg, "byzantine_attack")
    local seen = {}   -- copies of what the neighbours sent last round
    node:wrap("sharing", function(sharing)
      return { combine = function(n, r, got, ...)
        for _, x in ipairs(seen) do x:free() end
        seen = {}
        for i, x in ipairs(got) do seen[i] = x:clone() end
        return sharing.combine(n, r, got, ...)
      end }
    end)
    local gen = tensor.generator(node.cfg.seed * 31 + node.uid)
    return {
      startup = function(n) n.log:write("byzantine_attack: this node sends %s vectors", name) end,
      checkpoint = function() return { seen = seen, gen = gen:state() } end,
      restore = function(_, t)
        for _, x in ipairs(seen) do x:free() end
        seen = t.seen or {}
        gen:set_state(t.gen)
      end,
      outgoing = function(_, flat)
        local honest = tensor.stack({ flat, table.unpack(seen) }, 0)
        local byz = attacks.craft(entry, honest, node.cfg.nodes, f, gen)
        honest:free()
        local v = byz[0]:clone()
        byz:free()
        return v
      end,
    }
  end,
}

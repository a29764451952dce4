--- Built-in action byzantine_attack: chosen nodes send an attack's vector instead of their model.
-- Options: attack = "sign_flip" or { "alie", z = ... } (see dpy.byzantine.attacks), nodes =
-- { uid, ... } or fraction = 0.2 (seeded), seed. A Byzantine node crafts its vector from what it
-- knows: its own honestly trained model and the models its neighbours sent it the round before;
-- n is the run's node count and f the number of Byzantine nodes. The uids go to the manifest
-- (actions.byzantine_attack.byzantine). D-PSGD runs.
local registry = require "dpy.registry"
local actions = require "dpy.actions"
local tensor = require "dpy.tensor"

return registry.register {
  kind = "action",
  name = "byzantine_attack",
  options = { attack = true, nodes = true, fraction = true, seed = true },
  doc = "chosen nodes send an attack's vector (sign_flip, alie, inner_product, gaussian, mimic, infinity, nan)",
  manifest = function(opts, cfg) return { byzantine = actions.choose_nodes(opts, cfg, "byzantine_attack") } end,
  new = function(opts, node)
    local attacks = require "dpy.byzantine.attacks"
    local entry = opts.attack or "sign_flip"
    local name = type(entry) == "table" and entry[1] or entry
    if not attacks.ATTACKS[name] then
      error(string.format("byzantine_attack: no attack named '%s'", tostring(name)), 0)
    end
    if node.cfg.algorithm ~= "dpsgd" then error("byzantine_attack: runs with algorithm = 'dpsgd'", 0) end
    if not actions.is_chosen(opts, node, "byzantine_attack") then return {} end
    local f = #actions.choose_nodes(opts, node.cfg, "byzantine_attack")
    local seen = {}   -- copies of what the neighbours sent last round
    local combine = node.sharing.combine
    node.sharing = { combine = function(n, r, got, ...)
      for _, x in ipairs(seen) do x:free() end
      seen = {}
      for i, x in ipairs(got) do seen[i] = x:clone() end
      return combine(n, r, got, ...)
    end }
    local gen = tensor.generator(node.cfg.seed * 31 + node.uid)
    table.insert(node.outgoing, function(flat)
      local honest = tensor.stack({ flat, table.unpack(seen) }, 0)
      local byz = attacks.craft(entry, honest, node.cfg.nodes, f, gen)
      honest:free()
      local v = byz[0]:clone()
      byz:free()
      return v
    end)
    return { startup = function(n) n.log:write("byzantine_attack: this node sends %s vectors", name) end }
  end,
}

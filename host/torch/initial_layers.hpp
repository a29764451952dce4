// initial_layers.hpp: the process's memo of layers' initial values (initial_layers.cpp).
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

// The memo's key for a layer of this kind and these arguments built from this seed.
std::string initial_layer_key(const std::string &kind, const double *args, int nargs, uint64_t seed);
// A new layer with the values of the one kept under key, or nullptr.
std::shared_ptr<torch::nn::Module> initial_layer_find(const std::string &key);
// Keeps a copy of made's values under key (only kinds whose construction draws).
void initial_layer_keep(const std::string &key, const std::shared_ptr<torch::nn::Module> &made) noexcept;
// Lets every kept layer go (the nodes are built).
void initial_layers_forget();

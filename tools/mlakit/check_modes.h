#pragma once
// `mlakit check --mode prefill | sparse` (check_modes.cpp): selection explained for a prefill or sparse decode call.

#include "args.h"
#include "mlakit/registry.h"

namespace mlakit::cli {

/// --batch requests of --ctx query tokens over as many keys, --heads, --dims (192/128, 128/128, 64/64), --dtype,
/// causal unless --non-causal. Exit status 0 when a backend is chosen, 1 when none (or the call is invalid), 2 for a
/// bad option.
int check_prefill(const Args& args, Device dev, const Preference& pref);
/// --batch x --s-q query tokens, --heads, --topk (and --extra-topk: an extra cache), --page-size, --ctx cache rows,
/// --kv-format (fp8_ds_mla by default; fp8_ds_v4 or --v4: DeepSeek V4's geometry). Exit status as check_prefill.
int check_sparse(const Args& args, Device dev, const Preference& pref);

}  // namespace mlakit::cli

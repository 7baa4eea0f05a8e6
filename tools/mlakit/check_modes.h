#pragma once
// `mlakit check --mode prefill | sparse` (check_modes.cpp): selection explained for a prefill or sparse decode call.

#include <cstdio>
#include <string>

#include "args.h"
#include "mlakit/registry.h"

namespace mlakit::cli {

/// Prints "<what> on <device>" and why the call itself is invalid; exit status 1.
int print_rejection(const std::string& what, Device dev, const Status& why);

/// Prints "<what> on <device>" and automatic selection's explanation (or --backend's answer) for `problem`, or why the
/// call is invalid when no backend was asked. Exit status 0 when a backend is chosen, else 1.
template <typename Problem>
int explain_selection(const Problem& problem, const std::string& what, Device dev, const Preference& pref) {
  const Registry registry = make_default_registry();
  const Selection sel = registry.select(problem, pref);
  if (!sel.backend && sel.passed_over.empty()) return print_rejection(what, dev, sel.status);  // invalid
  std::printf("%s on %s\n%s", what.c_str(), device_name(dev).c_str(), sel.explain().c_str());
  return sel.backend ? 0 : 1;
}

/// --batch requests of --ctx query tokens over as many keys, --heads, --dims (192/128, 128/128, 64/64), --dtype,
/// causal unless --non-causal. Exit status 0 when a backend is chosen, 1 when none (or the call is invalid), 2 for a
/// bad option.
int check_prefill(const Args& args, Device dev, const Preference& pref);
/// --batch x --s-q query tokens, --heads, --topk (and --extra-topk: an extra cache), --page-size, --ctx cache rows,
/// --kv-format (fp8_ds_mla by default; fp8_ds_v4 or --v4: DeepSeek V4's geometry). Exit status as check_prefill.
int check_sparse(const Args& args, Device dev, const Preference& pref);

}  // namespace mlakit::cli

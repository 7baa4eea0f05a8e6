#pragma once
// The pieces of the mlakit._native module, one binder per file.

#include "convert.h"

namespace mlakit::py {

void bind_ops(nb::module_& m);          // ops.cpp: decode ... gather_kv and their select_* twins
void bind_decode_plan(nb::module_& m);  // decode_plan.cpp: DecodePlan
void bind_registry(nb::module_& m);     // registry.cpp: backends(), Selection, BackendInfo
void bind_helpers(nb::module_& m);      // helpers.cpp: YaRN tables and softmax scale, version
void bind_context_parallel(nb::module_& m);  // context_parallel.cpp: shard_seq_lens, shard_slot_mapping

/// The `shard=` argument (context_parallel.cpp): None, or (world, rank) or (world, rank, interleave).
ContextShard context_shard(nb::handle shard);

}  // namespace mlakit::py

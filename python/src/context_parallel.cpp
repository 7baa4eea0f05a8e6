// Context parallelism from Python (docs/spec.md section 11): the `shard=` argument of decode and DecodePlan, and
// the helpers each rank runs before a step (its local lengths, its append_kv slot_mapping). The exchange over NCCL
// (ContextParallelDecode) has no Python binding yet: a rank can merge its partials itself with mlakit.merge.

#include <string>

#include "mlakit/context_parallel.h"
#include "ops.h"

namespace mlakit::py {

ContextShard context_shard(nb::handle shard) {
  if (shard.is_none()) return {};
  const auto bad = [] {
    throw_conversion("shard", "must be None or a tuple (world, rank) or (world, rank, interleave) of ints");
  };
  if (!nb::isinstance<nb::tuple>(shard) && !nb::isinstance<nb::list>(shard)) bad();
  const nb::sequence seq = nb::borrow<nb::sequence>(shard);
  const size_t n = nb::len(seq);
  if (n != 2 && n != 3) bad();
  int32_t v[3] = {1, 0, 1};
  for (size_t i = 0; i < n; ++i) {
    if (!nb::isinstance<nb::int_>(seq[i])) bad();
    const long long x = nb::cast<long long>(seq[i]);
    v[i] = x < INT32_MIN ? INT32_MIN : x > INT32_MAX ? INT32_MAX : int32_t(x);  // out of range: validation names it
  }
  return ContextShard{v[0], v[1], v[2]};
}

void bind_context_parallel(nb::module_& m) {
  using nb::arg;
  m.def(
      "shard_seq_lens",
      [](nb::handle seq_lens, nb::handle local_seq_lens, nb::handle shard, nb::handle stream) {
        ArgHolder args;
        ShardSeqLensProblem p;
        p.shard = context_shard(shard);
        p.seq_lens = args.view(seq_lens, "seq_lens", Access::kRead);
        p.local_seq_lens = args.view(local_seq_lens, "local_seq_lens", Access::kWrite);
        const Stream s = resolve_stream(stream, args, p.seq_lens.device);
        call_without_gil([&] { return shard_seq_lens(p, s); });
      },
      arg("seq_lens"), arg("local_seq_lens"), nb::kw_only(), arg("shard"), arg("stream") = nb::none(),
      "local_seq_lens[b] = the tokens of request b (global length seq_lens[b]) that this rank holds "
      "(docs/spec.md section 11).");
  m.def(
      "shard_slot_mapping",
      [](nb::handle positions, nb::handle query_start_loc, nb::handle block_table, nb::handle slot_mapping,
         nb::handle shard, int64_t page_size, nb::handle stream) {
        ArgHolder args;
        ShardSlotMappingProblem p;
        p.shard = context_shard(shard);
        p.positions = args.view(positions, "positions", Access::kRead);
        p.query_start_loc = args.view(query_start_loc, "query_start_loc", Access::kRead);
        p.block_table = args.view(block_table, "block_table", Access::kRead);
        p.page_size = page_size;
        p.slot_mapping = args.view(slot_mapping, "slot_mapping", Access::kWrite);
        const Stream s = resolve_stream(stream, args, p.positions.device);
        call_without_gil([&] { return shard_slot_mapping(p, s); });
      },
      arg("positions"), arg("query_start_loc"), arg("block_table"), arg("slot_mapping"), nb::kw_only(), arg("shard"),
      arg("page_size"), arg("stream") = nb::none(),
      "append_kv's slot_mapping for this rank: each new token it owns goes to its local slot, every other token to "
      "-1 (docs/spec.md section 11).");
}

}  // namespace mlakit::py

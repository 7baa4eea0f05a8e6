// `mlakit check`: builds the decode call the options describe (without running it) and explains which
// backend automatic selection (or --backend) picks, and why every other backend was passed over. --mode prefill and
// --mode sparse do the same for those calls (check_modes.cpp).

#include <cstdio>
#include <vector>

#include "args.h"
#include "check_modes.h"
#include "commands.h"
#include "decode_spec.h"
#include "device_memory.h"
#include "mlakit/registry.h"

namespace mlakit::cli {
namespace {

constexpr const char* kHelp = R"(usage: mlakit check [options]
  --mode M           decode (default) | prefill | sparse
  decode:  --batch N --ctx L --heads H --s-q S --page-size P --kv-format F --causal   (default: b=128, L=8192,
           h_q=16, s_q=1, P=64, bf16)
  prefill: --batch N requests of --ctx L query tokens over as many keys, --heads H, --dims 192/128|128/128|64/64,
           --dtype bf16|fp16, --non-causal   (default: 1 x 4096, h=128, 192/128, bf16, causal)
  sparse:  --batch N --s-q S --heads H --topk K --extra-topk E --page-size P --ctx ROWS --kv-format F --v4
           (default: b=128, s_q=2, h_q=128, topk=2048, no extra cache, P=64, 8192 rows, fp8_ds_mla; fp8_ds_v4 or
           --v4: DeepSeek V4's geometry)
  --device D         cpu | cuda (default: cuda when built with CUDA, else cpu)
  --backend NAME     ask for one backend instead of automatic selection
Nothing is allocated on the device and nothing runs: only validation and each backend's supports().
)";

}  // namespace

int cmd_check(int argc, char** argv) {
  std::set<std::string> options = decode_options();
  options.insert({"device", "mode", "dims", "dtype", "topk", "extra-topk"});
  Args args;
  Status s = Args::parse(argc, argv, 2, options, {"help", "causal", "non-causal", "v4"}, &args);
  if (!s.ok() || args.has("help")) {
    if (!s.ok()) std::fprintf(stderr, "%s\n\n", s.message().c_str());
    std::fputs(kHelp, s.ok() ? stdout : stderr);
    return s.ok() ? 0 : 2;
  }
  const std::string mode = args.get("mode", "decode");
  const std::string device = args.get("device", build_info().find("cuda=ON") != std::string::npos ? "cuda" : "cpu");
  if (device != "cpu" && device != "cuda") {
    std::fprintf(stderr, "--device=%s: must be cpu or cuda\n", device.c_str());
    return 2;
  }
  const Device dev = device == "cpu" ? Device::cpu() : Device::cuda(0);
  const Preference pref{args.get("backend", "")};
  if (mode == "prefill") return check_prefill(args, dev, pref);
  if (mode == "sparse") return check_sparse(args, dev, pref);
  if (mode != "decode") {
    std::fprintf(stderr, "--mode=%s: must be decode, prefill or sparse\n", mode.c_str());
    return 2;
  }
  for (const char* name : {"dims", "dtype", "topk", "extra-topk", "non-causal", "v4"}) {
    if (args.has(name)) {
      std::fprintf(stderr, "--%s: does not apply to --mode decode\n", name);
      return 2;
    }
  }
  std::vector<DecodeSpec> specs(1);
  s = apply_overrides(args, &specs);
  if (!s.ok() || specs.size() != 1) {
    std::fprintf(stderr, "%s\n", s.ok() ? "--kv-format=all: check takes one format" : s.message().c_str());
    return 2;
  }
  const DecodeSpec& spec = specs[0];
  const std::string what = "decode " + spec.describe();

  // The whole description is validated before anything is allocated (sizes, int32 limits, validate()'s shapes).
  DecodeLayout layout;
  if (Status v = check_decode_spec(spec, &layout); !v.ok()) return print_rejection(what, dev, v);

  // Only the integer inputs are real memory, on the CPU alone (validate() reads them there): b lengths, and one
  // row of page ids 0..ceil(L/P)-1 that every request reads (row stride 0), not b rows. The other buffers sit at
  // distinct addresses nothing reads.
  std::vector<int32_t> table_row, lens;
  DecodeBuffers buffers = placeholder_buffers();
  if (dev.is_cpu()) {
    Status a = host_allocation("block_table (host)", size_t(layout.pages_per_req) * 4,
                               [&] { table_row.resize(size_t(layout.pages_per_req)); });
    if (a.ok()) a = host_allocation("seq_lens (host)", size_t(layout.lens_bytes),
                                    [&] { lens.assign(size_t(spec.batch), int32_t(spec.ctx)); });
    if (!a.ok()) {
      std::fprintf(stderr, "%s\n", a.message().c_str());
      return 1;
    }
    for (size_t i = 0; i < table_row.size(); ++i) table_row[i] = int32_t(i);
    buffers.block_table = table_row.data();
    buffers.seq_lens = lens.data();
  }
  DecodeProblem pr = make_decode_problem(spec, layout, buffers, dev);
  if (dev.is_cpu()) pr.block_table.stride[0] = 0;

  return explain_selection(pr, what, dev, pref);
}

}  // namespace mlakit::cli

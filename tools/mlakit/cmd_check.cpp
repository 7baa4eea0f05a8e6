// `mlakit check`: builds the decode call the options describe (without running it) and explains which
// backend automatic selection (or --backend) picks, and why every other backend was passed over.

#include <cstdio>
#include <vector>

#include "args.h"
#include "commands.h"
#include "decode_spec.h"
#include "mlakit/registry.h"

namespace mlakit::cli {
namespace {

constexpr const char* kHelp = R"(usage: mlakit check [options]
  --batch N --ctx L --heads H --s-q S --page-size P --kv-format F --causal   the decode call (default: b=128,
                     L=8192, h_q=16, s_q=1, P=64, bf16)
  --device D         cpu | cuda (default: cuda when built with CUDA, else cpu)
  --backend NAME     ask for one backend instead of automatic selection
Nothing is allocated on the device and nothing runs: only validation and each backend's supports().
)";

// Stand-in address for device tensors: validate() and supports() never dereference device memory.
// 256-byte aligned, like any cudaMalloc result.
void* const kUnreadDeviceAddress = reinterpret_cast<void*>(uintptr_t(1) << 20);

}  // namespace

int cmd_check(int argc, char** argv) {
  std::set<std::string> options = decode_options();
  options.insert("device");
  Args args;
  Status s = Args::parse(argc, argv, 2, options, {"help", "causal"}, &args);
  if (!s.ok() || args.has("help")) {
    if (!s.ok()) std::fprintf(stderr, "%s\n\n", s.message().c_str());
    std::fputs(kHelp, s.ok() ? stdout : stderr);
    return s.ok() ? 0 : 2;
  }
  std::vector<DecodeSpec> specs(1);
  s = apply_overrides(args, &specs);
  const std::string device = args.get("device", build_info().find("cuda=ON") != std::string::npos ? "cuda" : "cpu");
  if (s.ok() && device != "cpu" && device != "cuda") s = Status::invalid("--device=" + device + ": must be cpu or cuda");
  if (!s.ok() || specs.size() != 1) {
    std::fprintf(stderr, "%s\n", s.ok() ? "--kv-format=all: check takes one format" : s.message().c_str());
    return 2;
  }
  const DecodeSpec& spec = specs[0];
  const Device dev = device == "cpu" ? Device::cpu() : Device::cuda(0);
  const MlaDims dims{};

  // Integer inputs are real host memory on the CPU (validate() reads them there); the rest is never read.
  const int64_t p = spec.page_size > 0 ? spec.page_size : 1;
  const int64_t pages_per_req = std::max<int64_t>(1, (spec.ctx + p - 1) / p);
  const int64_t b = std::max<int64_t>(spec.batch, 0);
  std::vector<int32_t> table(size_t(b * pages_per_req)), lens(size_t(b), int32_t(spec.ctx));
  for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(i);
  void* any = kUnreadDeviceAddress;
  DecodeProblem pr;
  pr.q = TensorView::contiguous(any, DType::kBF16, {spec.batch, spec.s_q, spec.h_q, dims.d_qk()}, dev);
  pr.kv = KvCacheView::contiguous(any, spec.format, std::max<int64_t>(1, b * pages_per_req), spec.page_size, dims, dev);
  pr.kv.kv_scale_value = 1.0f;
  pr.block_table = TensorView::contiguous(dev.is_cpu() ? table.data() : any, DType::kInt32, {spec.batch, pages_per_req}, dev);
  pr.seq_lens = TensorView::contiguous(dev.is_cpu() ? lens.data() : any, DType::kInt32, {spec.batch}, dev);
  pr.out = TensorView::contiguous(any, DType::kBF16, {spec.batch, spec.s_q, spec.h_q, dims.d_v()}, dev);
  pr.lse = TensorView::contiguous(any, DType::kFP32, {spec.batch, spec.s_q, spec.h_q}, dev);
  pr.softmax_scale = spec.softmax_scale;
  pr.causal = spec.causal;

  const Registry registry = make_default_registry();
  const Selection sel = registry.select(pr, Preference{args.get("backend", "")});
  std::printf("decode %s on %s\n", spec.describe().c_str(), device_name(dev).c_str());
  if (!sel.backend && sel.passed_over.empty()) {  // the call itself is invalid: no backend was asked
    std::printf("rejected: %s\n", sel.status.to_string().c_str());
    return 1;
  }
  std::printf("%s", sel.explain().c_str());
  return sel.backend ? 0 : 1;
}

}  // namespace mlakit::cli

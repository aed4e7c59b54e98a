// stories.cpp: the article's multi-job stories (section 3), run on a simulated machine.
//
// [SECTION] jobs: a simulated process with its Runtime, training model replicas
// [SECTION] two-jobs: job A on GPUs 0,1 and job B on 2,3 (article 3.2)
// [SECTION] select-gpu: select_least_used_gpu (article 3.3), its two traps, a fix, the race
//           between check and use that the fix leaves with two jobs, and a launcher
//
// A job's work is real: nn.DataParallel over the devices it uses (the model on the first, a
// replica per step on the others), a few SGD steps on a synthetic batch, so every byte smi shows
// comes from the caching allocator and every busy percent from modelled kernels.
#include "furnace/stories.h"  // defines: run_story

#include <algorithm>
#include <memory>

#include "furnace/allocator.h"  // defines: format_size
#include "furnace/error.h"
#include "furnace/nn.h"         // defines: MLP, SGD, CrossEntropyLoss
#include "furnace/parallel.h"   // defines: DataParallel
#include "furnace/process.h"
#include "furnace/runtime.h"
#include "furnace/topology.h"

namespace furnace {
namespace {

constexpr const char* kDefaultTopology = "workstation-4x3090";
constexpr int kSteps = 2;        // training steps per replica
constexpr int64_t kBatch = 128;  // synthetic batch per replica

std::string mib(uint64_t bytes) { return std::to_string(bytes >> 20) + "MiB"; }

// ---- [SECTION] jobs -------------------------------------------------------------------------

class Job {
 public:
  Job(SimMachine& machine, const std::string& name, Environment env)
      : process_(machine.spawn(name, std::move(env))),
        rt_(std::make_unique<Runtime>(machine.attach(process_, &bus_), bus_)) {}
  ~Job() {
    replicas_.clear();  // tensors go back before the runtime (the wrapper before its module)
    rt_.reset();
  }

  Process& process() { return process_; }
  Runtime& rt() { return *rt_; }
  std::string who() const { return process_.name() + " (pid " + std::to_string(process_.pid()) + ")"; }

  // Trains a 784-`hidden`-`hidden`-10 MLP for kSteps SGD steps as the printed code does:
  // model.cuda() builds it on devices[0], nn.DataParallel(model, device_ids=devices) scatters a
  // batch of kBatch rows per device from the host, replicates the model on every step, gathers
  // the outputs on devices[0] and reduce-adds the gradients there. With one device DataParallel
  // calls the module directly. The model, its gradients and the momentum stay on devices[0];
  // the other devices keep only what their per-step replicas left in the caching allocator.
  void train_on(const std::vector<int>& devices, int hidden, uint64_t seed) {
    const int d0 = devices.front();
    rt_->set_device(d0);
    auto r = std::make_unique<Replica>();
    OpContext ctx{*rt_, d0, 0};
    r->model = std::make_unique<MLP>(*rt_, d0, std::vector<int>{784, hidden, hidden, 10});
    r->model->init_parameters(ctx, seed);
    r->optimizer = std::make_unique<SGD>(r->model->parameters(), 0.05f, 0.9f);
    r->dp = std::make_unique<DataParallel>(*rt_, *r->model, devices, std::nullopt,
                                           [](const std::string&) {});
    const int64_t batch = kBatch * static_cast<int64_t>(devices.size());
    Tensor x = Tensor::empty_host({batch, 784});
    std::vector<int32_t> y(static_cast<size_t>(batch));
    uint64_t s = seed * 2654435761u + 1;
    float* xp = x.data<float>();
    for (int64_t i = 0; i < batch * 784; ++i)
      xp[i] = static_cast<float>((s = s * 6364136223846793005ull + 1) >> 40) / 16777216.0f;
    for (int32_t& v : y) v = static_cast<int32_t>(((s = s * 6364136223846793005ull + 1) >> 33) % 10);
    for (int step = 0; step < kSteps; ++step) {
      Tensor yt = Tensor::empty(*rt_, Device::cuda(d0), {batch}, DType::i32);
      ops::copy_to_device(ctx, yt, y.data());
      Tensor logits = r->dp->forward(ctx, x);  // the output lands on output_device = devices[0]
      CrossEntropyLoss loss;
      loss.forward(ctx, logits, yt);
      r->optimizer->zero_grad(ctx);
      r->dp->backward(ctx, loss.backward(ctx));
      r->optimizer->step(ctx);
      r->model->release_activations();
    }
    replicas_.push_back(std::move(r));
  }

  StoryProcess report() {
    StoryProcess p;
    p.pid = process_.pid();
    p.name = process_.name();
    p.env = process_.environment();
    p.visibility = process_.visibility();
    if (!rt_->is_initialized()) return p;
    for (int d = 0; d < rt_->device_count(); ++d) {
      StoryProcess::Device dev;
      dev.ordinal = d;
      dev.physical_index = rt_->backend().physical_index(d);
      dev.context_bytes = rt_->backend().raw_allocator(d).process_overhead_bytes();
      dev.reserved_bytes = rt_->memory_reserved(d);
      dev.allocated_bytes = rt_->memory_allocated(d);
      p.devices.push_back(dev);
    }
    return p;
  }

 private:
  struct Replica {  // one model with its optimizer and its DataParallel wrapper
    std::unique_ptr<MLP> model;
    std::unique_ptr<SGD> optimizer;
    std::unique_ptr<DataParallel> dp;
  };
  TraceBus bus_;
  Process& process_;
  std::unique_ptr<Runtime> rt_;
  std::vector<std::unique_ptr<Replica>> replicas_;
};

// Collects the steps of one part.
class Story {
 public:
  explicit Story(StoryPart& part) : part_(part) {}
  void shell(const std::string& text, const std::string& who = "") { add(StoryStep::Kind::shell, who, text); }
  void code(const std::string& who, const std::string& text) { add(StoryStep::Kind::code, who, text); }
  void out(const std::string& who, const std::string& text) { add(StoryStep::Kind::output, who, text); }
  void note(const std::string& text, const std::string& who = "") { add(StoryStep::Kind::note, who, text); }
  void smi(const SimMachine& m, const std::string& text) {
    add(StoryStep::Kind::smi, "", text);
    part_.steps.back().smi = m.smi();
  }

 private:
  void add(StoryStep::Kind k, const std::string& who, const std::string& text) {
    part_.steps.push_back({k, who, text, std::nullopt});
  }
  StoryPart& part_;
};

std::string gpu_text(const Topology& t, int physical) {
  const GpuSpec& g = t.gpus[static_cast<size_t>(physical)];
  return "GPU " + std::to_string(physical) + " (" + g.name + ", " + g.pci_bus_id + ")";
}

// "Furnace runs nn.DataParallel ...: cuda:0 is GPU 2 (...), cuda:1 is GPU 3 (...)."
std::string replicas_note(const Topology& t, Runtime& rt, int hidden) {
  std::string s = "Furnace trains the model (MLP 784-" + std::to_string(hidden) + "-" +
                  std::to_string(hidden) + "-10) for " + std::to_string(kSteps) +
                  " SGD steps on " + std::to_string(kBatch) + " rows per device";
  if (rt.device_count() > 1)
    s += " through nn.DataParallel: the model, its gradients and its momentum live on cuda:0 "
         "(device_ids[0]); every step scatters the batch, replicates the model onto the other "
         "devices, gathers the outputs on cuda:0 and reduce-adds the gradients there";
  s += ": ";
  for (int d = 0; d < rt.device_count(); ++d)
    s += (d ? ", " : "") + ("cuda:" + std::to_string(d) + " is " + gpu_text(t, rt.backend().physical_index(d)));
  return s + ".";
}

void finish_part(StoryPart& part, SimMachine& m, std::vector<Job*> jobs) {
  for (Job* j : jobs) part.processes.push_back(j->report());
  part.smi = m.smi();
}

// ---- [SECTION] two-jobs ---------------------------------------------------------------------

void two_jobs(StoryResult& r, const Topology& topo) {
  SimMachine m(topo);
  StoryPart& part = r.parts.emplace_back();
  part.title = "two jobs share one machine (article 3.2)";
  Story s(part);
  s.note("A " + std::to_string(topo.gpus.size()) + "-GPU machine (" + topo.name +
         "); two users each start a training job in their own terminal.");

  s.shell("# terminal 1: job A uses GPUs 0 and 1");
  s.shell("export CUDA_VISIBLE_DEVICES=0,1");
  s.shell("python train_a.py");
  Job a(m, "train_a.py", {{kCudaVisibleDevices, "0,1"}});
  s.code(a.who(), "print(torch.cuda.device_count())");
  s.out(a.who(), std::to_string(a.rt().device_count()));
  a.train_on({0, 1}, 1024, 1);
  s.code(a.who(), "model = nn.DataParallel(model).cuda()  # device_ids: both visible GPUs");
  s.note(replicas_note(topo, a.rt(), 1024), a.who());

  s.shell("# terminal 2: job B uses GPUs 2 and 3");
  s.shell("export CUDA_VISIBLE_DEVICES=2,3");
  s.shell("python train_b.py");
  Job b(m, "train_b.py", {{kCudaVisibleDevices, "2,3"}});
  s.code(b.who(), "print(torch.cuda.device_count())");
  s.out(b.who(), std::to_string(b.rt().device_count()));
  b.train_on({0, 1}, 2048, 2);
  s.code(b.who(), "model = nn.DataParallel(model).cuda()");
  s.note(replicas_note(topo, b.rt(), 2048), b.who());
  s.note("Both jobs train on \"cuda:0\" and \"cuda:1\": inside each process CUDA_VISIBLE_DEVICES "
         "renumbers the visible GPUs from 0, so the same names are different cards (job A's cuda:0 "
         "is GPU 0, job B's is GPU 2). Physical numbers mean nothing inside a masked process: "
         "nn.DataParallel(model, device_ids=[2,3]) in job B raises 'AssertionError: Invalid device id'.");
  s.code(b.who(), "torch.cuda.memory_allocated(0), torch.cuda.memory_reserved(0)");
  s.out(b.who(), "(" + std::to_string(b.rt().memory_allocated(0)) + ", " +
                     std::to_string(b.rt().memory_reserved(0)) + ")  # " +
                     format_size(b.rt().memory_allocated(0)) + " in tensors, " +
                     format_size(b.rt().memory_reserved(0)) + " reserved, on its cuda:0 = GPU 2");
  s.shell("nvidia-smi");
  s.smi(m, "every GPU's memory is the sum over the processes on it: each process's CUDA context "
           "(created by its first use of the GPU) plus the segments its caching allocator "
           "reserved; nvidia-smi numbers GPUs in PCI bus order and ignores CUDA_VISIBLE_DEVICES");
  finish_part(part, m, {&a, &b});
}

// ---- [SECTION] select-gpu -------------------------------------------------------------------

const char* kArticleFunction =
    "import os\n"
    "import torch\n"
    "def select_least_used_gpu(num_gpus=1):\n"
    "    \"\"\"选择使用率最低的GPU\"\"\"\n"
    "    device_usage = []\n"
    "    for i in range(torch.cuda.device_count()):\n"
    "        mem = torch.cuda.memory_allocated(i)\n"
    "        device_usage.append((i, mem))\n"
    "    # 按内存使用量排序\n"
    "    device_usage.sort(key=lambda x: x[1])\n"
    "    selected = [str(x[0]) for x in device_usage[:num_gpus]]\n"
    "    return \",\".join(selected)";

const char* kFixedFunction =
    "import os\n"
    "import pynvml  # NVML: the machine-wide view nvidia-smi shows; it does not initialise CUDA\n"
    "pynvml.nvmlInit()\n"
    "def select_least_used_gpu(num_gpus=1):\n"
    "    used = []\n"
    "    for i in range(pynvml.nvmlDeviceGetCount()):  # every GPU, nvidia-smi's numbers\n"
    "        h = pynvml.nvmlDeviceGetHandleByIndex(i)\n"
    "        used.append((pynvml.nvmlDeviceGetMemoryInfo(h).used, i))  # all processes\n"
    "    return \",\".join(str(i) for _, i in sorted(used)[:num_gpus])";

// Job A on GPUs 0,1 (trained), as the machine the new job finds.
std::unique_ptr<Job> start_job_a(SimMachine& m, Story& s) {
  s.shell("CUDA_VISIBLE_DEVICES=0,1 python train_a.py &   # job A is already training on GPUs 0 and 1");
  auto a = std::make_unique<Job>(m, "train_a.py", Environment{{kCudaVisibleDevices, "0,1"}});
  a->train_on({0, 1}, 1024, 1);
  s.smi(m, "the machine the new job finds: job A holds GPUs 0 and 1, GPUs 2 and 3 are idle");
  return a;
}

void select_gpu_naive(StoryResult& r, const Topology& topo) {
  SimMachine m(topo);
  StoryPart& part = r.parts.emplace_back();
  part.title = "the article's select_least_used_gpu (article 3.3)";
  Story s(part);
  std::unique_ptr<Job> a = start_job_a(m, s);

  s.shell("python train_b.py   # no CUDA_VISIBLE_DEVICES: the script picks its GPUs itself");
  Job b(m, "train_b.py", {});
  Runtime& rt = b.rt();
  s.code(b.who(), "print(f\"可用GPU数量: {torch.cuda.device_count()}\")");
  s.out(b.who(), "可用GPU数量: " + std::to_string(rt.device_count()));
  s.code(b.who(), "print(f\"当前设备: {torch.cuda.current_device()}\")");
  s.out(b.who(), "当前设备: " + std::to_string(rt.current_device()));
  s.note("current_device() is this process's first device use: CUDA initialises now and reads "
         "CUDA_VISIBLE_DEVICES (not set: all " + std::to_string(rt.device_count()) +
         " GPUs). From here on the mapping is fixed.", b.who());

  s.code(b.who(), kArticleFunction);
  std::vector<std::pair<int, uint64_t>> usage;
  std::string seen;
  for (int i = 0; i < rt.device_count(); ++i) {
    usage.emplace_back(i, rt.memory_allocated(i));
    seen += (seen.empty() ? "" : ", ") + std::to_string(usage.back().second);
  }
  std::stable_sort(usage.begin(), usage.end(), [](auto& x, auto& y) { return x.second < y.second; });
  std::string choice;
  for (size_t k = 0; k < 2 && k < usage.size(); ++k)
    choice += (choice.empty() ? "" : ",") + std::to_string(usage[k].first);
  s.code(b.who(), "[torch.cuda.memory_allocated(i) for i in range(torch.cuda.device_count())]");
  s.out(b.who(), "[" + seen + "]");
  s.code(b.who(), "select_least_used_gpu(2)");
  s.out(b.who(), "'" + choice + "'");
  const SmiSnapshot now = m.smi();
  s.note("Trap 1: memory_allocated(i) counts only the tensors of the calling process (its own "
         "caching allocator). Job A's " + mib(now.gpus[0].used_bytes) + " on GPU 0 and " +
         mib(now.gpus[1].used_bytes) + " on GPU 1 are invisible to it, so every GPU looks empty "
         "and the sort keeps the order 0, 1, 2, 3: it picks '" + choice +
         "', job A's GPUs.", b.who());

  s.code(b.who(), "os.environ['CUDA_VISIBLE_DEVICES'] = select_least_used_gpu(2)\n"
                  "print(torch.cuda.device_count())");
  b.process().setenv(kCudaVisibleDevices, choice);
  s.out(b.who(), std::to_string(rt.device_count()));
  const Visibility would = resolve_visibility(topo.gpus, b.process().environment());
  s.note("Trap 2: CUDA read CUDA_VISIBLE_DEVICES at the first device use (current_device() above); "
         "setting it afterwards changes os.environ but not CUDA: the process still sees " +
         std::to_string(rt.device_count()) + " GPUs. (Set before the first device call, '" + choice +
         "' would have given " + would.mapping_text() + ".)", b.who());

  std::vector<int> all;
  for (int d = 0; d < rt.device_count(); ++d) all.push_back(d);
  b.train_on(all, 2048, 2);
  s.code(b.who(), "model = nn.DataParallel(model).cuda()  # device_ids: every visible GPU");
  s.note(replicas_note(topo, rt, 2048), b.who());
  s.shell("nvidia-smi");
  s.smi(m, "job B now holds memory on every GPU, job A's 0 and 1 included: the function was meant "
           "to avoid exactly that. Even without trap 2, its choice '" + choice +
           "' would have landed on job A's GPUs.");
  finish_part(part, m, {a.get(), &b});
}

// The fixed select_least_used_gpu(n) as NVML answers it now: nvidia-smi's GPU numbers sorted by
// the memory every process uses there (asking does not initialise CUDA). `seen_mib`: the
// per-GPU MiB the function looked at, "444, 444, 0, 0".
std::string least_used_by_nvml(const SimMachine& m, size_t n, std::string* seen_mib = nullptr) {
  std::vector<std::pair<uint64_t, int>> used;
  std::string seen;
  for (const SmiGpu& g : m.smi().gpus) {
    used.emplace_back(g.used_bytes, g.index);
    seen += (seen.empty() ? "" : ", ") + std::to_string(g.used_bytes >> 20);
  }
  std::sort(used.begin(), used.end());
  std::string choice;
  for (size_t k = 0; k < n && k < used.size(); ++k)
    choice += (choice.empty() ? "" : ",") + std::to_string(used[k].second);
  if (seen_mib) *seen_mib = seen;
  return choice;
}

void select_gpu_fixed(StoryResult& r, const Topology& topo) {
  SimMachine m(topo);
  StoryPart& part = r.parts.emplace_back();
  part.title = "a version that works: the machine-wide view, before the first device call";
  Story s(part);
  std::unique_ptr<Job> a = start_job_a(m, s);

  s.shell("python train_b.py");
  Job b(m, "train_b.py", {});
  s.code(b.who(), kFixedFunction);
  std::string seen;
  const std::string choice = least_used_by_nvml(m, 2, &seen);
  s.code(b.who(), "[pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).used >> 20\n"
                  " for i in range(pynvml.nvmlDeviceGetCount())]  # MiB");
  s.out(b.who(), "[" + seen + "]");
  s.code(b.who(), "select_least_used_gpu(2)");
  s.out(b.who(), "'" + choice + "'");
  s.note("NVML reports the memory every process uses (what nvidia-smi shows), and asking it does "
         "not initialise CUDA in this process.", b.who());

  s.code(b.who(), "os.environ['CUDA_DEVICE_ORDER'] = 'PCI_BUS_ID'  # NVML counts in PCI bus order\n"
                  "os.environ['CUDA_VISIBLE_DEVICES'] = select_least_used_gpu(2)  # before any torch.cuda call\n"
                  "import torch\n"
                  "print(torch.cuda.device_count(), torch.cuda.current_device())");
  b.process().setenv(kCudaDeviceOrder, "PCI_BUS_ID");
  b.process().setenv(kCudaVisibleDevices, choice);
  Runtime& rt = b.rt();
  const int count = rt.device_count();
  s.out(b.who(), std::to_string(count) + " " + std::to_string(rt.current_device()));
  s.note("The variable was set before the first device use, so CUDA reads it: " +
         b.process().visibility().mapping_text() + ". CUDA_DEVICE_ORDER=PCI_BUS_ID makes CUDA's "
         "integers mean NVML's GPUs (the default FASTEST_FIRST need not agree on mixed machines); "
         "GPU UUIDs (CUDA_VISIBLE_DEVICES=GPU-...) avoid the question altogether.", b.who());
  std::vector<int> all;
  for (int d = 0; d < count; ++d) all.push_back(d);
  b.train_on(all, 2048, 2);
  s.code(b.who(), "model = nn.DataParallel(model).cuda()");
  s.note(replicas_note(topo, rt, 2048), b.who());
  s.shell("nvidia-smi");
  std::string b_gpus;
  for (const SmiGpu& g : m.smi().gpus)
    for (const SmiProcess& p : g.processes)
      if (p.pid == b.process().pid()) b_gpus += (b_gpus.empty() ? "" : " and ") + std::to_string(g.index);
  s.smi(m, "job A on GPUs 0 and 1, job B on GPUs " + b_gpus + " (its cuda:0 and cuda:1): no GPU is shared");
  s.note("The other way that works: choose in the launching process (a shell script, a scheduler) "
         "and start the job with CUDA_VISIBLE_DEVICES=" + choice + " in its environment, as in "
         "the two-jobs scenario.");
  finish_part(part, m, {a.get(), &b});
}

const char* kLauncher =
    "import os, subprocess, sys\n"
    "import pynvml\n"
    "pynvml.nvmlInit()\n"
    "used = sorted((pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).used, i)\n"
    "              for i in range(pynvml.nvmlDeviceGetCount()))\n"
    "free = [i for _, i in used]                   # least used first\n"
    "for script, gpu in zip(sys.argv[1:], free):   # one GPU each: no two jobs get the same one\n"
    "    env = dict(os.environ, CUDA_DEVICE_ORDER=\"PCI_BUS_ID\", CUDA_VISIBLE_DEVICES=str(gpu))\n"
    "    print(f\"{script}: CUDA_VISIBLE_DEVICES={gpu}\")\n"
    "    subprocess.Popen([sys.executable, script], env=env)";

// What the fixed version does once it has chosen: pins the variables before the first device
// use, then trains a replica on every GPU the job now sees.
void start_on(Job& job, const std::string& visible, int hidden, uint64_t seed) {
  job.process().setenv(kCudaDeviceOrder, "PCI_BUS_ID");
  job.process().setenv(kCudaVisibleDevices, visible);
  std::vector<int> all;
  for (int d = 0; d < job.rt().device_count(); ++d) all.push_back(d);
  job.train_on(all, hidden, seed);
}

// Who holds GPU memory on each of nvidia-smi's GPUs: "GPU 2: train_b.py, train_c.py".
std::string holders(const SimMachine& m, int gpu) {
  std::string names;
  const SmiSnapshot now = m.smi();
  for (const SmiProcess& p : now.gpus[static_cast<size_t>(gpu)].processes)
    names += (names.empty() ? "" : ", ") + p.name;
  return "GPU " + std::to_string(gpu) + ": " + (names.empty() ? "nobody" : names);
}

void select_gpu_race(StoryResult& r, const Topology& topo) {
  SimMachine m(topo);
  StoryPart& part = r.parts.emplace_back();
  part.title = "the race: two jobs check at the same moment, then use what they chose";
  Story s(part);
  std::unique_ptr<Job> a = start_job_a(m, s);

  s.shell("python train_b.py & python train_c.py &   # a sweep starts two runs at once, both with "
          "the version that works");
  Job b(m, "train_b.py", {});
  Job c(m, "train_c.py", {});
  // Both look before either has made its first allocation: importing torch, reading the data
  // and building the model take seconds, plenty of time for the other job to look too.
  std::string seen_b, seen_c;
  const std::string pick_b = least_used_by_nvml(m, 2, &seen_b);
  const std::string pick_c = least_used_by_nvml(m, 2, &seen_c);
  auto check = [&](Job& job, const std::string& seen, const std::string& pick) {
    s.code(job.who(), "[pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).used >> 20\n"
                      " for i in range(pynvml.nvmlDeviceGetCount())]  # MiB");
    s.out(job.who(), "[" + seen + "]");
    s.code(job.who(), "select_least_used_gpu(2)");
    s.out(job.who(), "'" + pick + "'");
  };
  check(b, seen_b, pick_b);
  check(c, seen_c, pick_c);
  s.note("Check and use are two moments. Job C looked after job B had chosen but before job B "
         "allocated anything, so it saw the same idle GPUs and chose the same '" + pick_c +
         "'. Asking NVML reserves nothing for the one who asked.");
  start_on(b, pick_b, 1024, 2);
  s.code(b.who(), "model = nn.DataParallel(model).cuda()");
  s.note(replicas_note(topo, b.rt(), 1024), b.who());
  start_on(c, pick_c, 1024, 3);
  s.code(c.who(), "model = nn.DataParallel(model).cuda()");
  s.note(replicas_note(topo, c.rt(), 1024), c.who());
  s.shell("nvidia-smi");
  s.smi(m, holders(m, 2) + "; " + holders(m, 3) + ": two jobs on the same two GPUs, each with its "
           "own context, sharing their memory and their compute");
  finish_part(part, m, {a.get(), &b, &c});
}

void select_gpu_launcher(StoryResult& r, const Topology& topo) {
  SimMachine m(topo);
  StoryPart& part = r.parts.emplace_back();
  part.title = "what works for several jobs: one launcher hands out the GPUs";
  Story s(part);
  std::unique_ptr<Job> a = start_job_a(m, s);

  s.shell("python launch.py train_b.py train_c.py   # one process decides for both jobs");
  s.code("launch.py", kLauncher);
  const std::string order = least_used_by_nvml(m, topo.gpus.size());
  const std::string gpu_b = order.substr(0, order.find(','));
  const std::string rest = order.substr(order.find(',') + 1);
  const std::string gpu_c = rest.substr(0, rest.find(','));
  s.out("launch.py", "train_b.py: CUDA_VISIBLE_DEVICES=" + gpu_b);
  s.out("launch.py", "train_c.py: CUDA_VISIBLE_DEVICES=" + gpu_c);
  Job b(m, "train_b.py", {{kCudaDeviceOrder, "PCI_BUS_ID"}, {kCudaVisibleDevices, gpu_b}});
  Job c(m, "train_c.py", {{kCudaDeviceOrder, "PCI_BUS_ID"}, {kCudaVisibleDevices, gpu_c}});
  for (Job* job : {&b, &c}) {
    s.code(job->who(), "print(torch.cuda.device_count(), torch.cuda.current_device())");
    s.out(job->who(), std::to_string(job->rt().device_count()) + " " + std::to_string(job->rt().current_device()));
    job->train_on({0}, 1024, job == &b ? 2 : 3);
    s.note(replicas_note(topo, job->rt(), 1024), job->who());
  }
  s.note("One process looked once and handed out different GPUs, so no second look can come in "
         "between: the check and the hand-out are one step. A cluster scheduler does the same for "
         "a whole machine room.");
  s.shell("nvidia-smi");
  s.smi(m, holders(m, 0) + "; " + holders(m, 1) + "; " + holders(m, 2) + "; " + holders(m, 3));
  finish_part(part, m, {a.get(), &b, &c});
}

}  // namespace

const char* story_step_kind_name(StoryStep::Kind k) {
  switch (k) {
    case StoryStep::Kind::shell: return "shell";
    case StoryStep::Kind::code: return "code";
    case StoryStep::Kind::output: return "output";
    case StoryStep::Kind::note: return "note";
    case StoryStep::Kind::smi: return "smi";
  }
  return "?";
}

std::vector<std::pair<std::string, std::string>> stories() {
  return {{"two-jobs", "job A on GPUs 0,1 and job B on GPUs 2,3 of one machine, each with its own "
                       "CUDA_VISIBLE_DEVICES (article 3.2)"},
          {"select-gpu", "the article's select_least_used_gpu and its two traps, a version that "
                         "works, its race when two jobs start at once, and a launcher (article 3.3)"}};
}

StoryResult run_story(const std::string& name, const std::string& topology) {
  std::string known;
  bool found = false;
  for (const auto& [n, d] : stories()) {
    known += (known.empty() ? "" : ", ") + n;
    found = found || n == name;
  }
  FURNACE_CHECK(found) << "unknown scenario '" << name << "' (scenarios: " << known << ")";
  const Topology topo = load_topology(topology.empty() ? kDefaultTopology : topology);
  FURNACE_CHECK(topo.gpus.size() >= 4)
      << "scenario '" << name << "' needs a machine with at least 4 GPUs; topology '" << topo.name
      << "' has " << topo.gpus.size();
  StoryResult r;
  r.name = name;
  r.topology = topo.name;
  if (name == "two-jobs") {
    r.title = "Two jobs, one machine: CUDA_VISIBLE_DEVICES per process";
    two_jobs(r, topo);
  } else {
    r.title = "select_least_used_gpu: two traps, a fix, the race it leaves, and a launcher";
    select_gpu_naive(r, topo);
    select_gpu_fixed(r, topo);
    select_gpu_race(r, topo);
    select_gpu_launcher(r, topo);
  }
  return r;
}

}  // namespace furnace

// step_setup.cpp: a step's [step.scenario] (lessons/FORMAT.md, "Scenario keys") read into the
// StepSetup of its action. Every key is declared once, in step_keys(): its name (the order of
// FORMAT.md's table, which is also the order the keys take effect), how it is read and checked,
// and how scenario_summary says it. Which keys an action reads is its entry in the actions table
// (actions.cpp). Not here: the rest of lesson.toml (lesson_file.cpp).
//
// [SECTION] the keys  [SECTION] reading a step's scenario  [SECTION] the summary
#include <algorithm>
#include <functional>
#include <set>

#include "furnace/allocator.h"     // defines: parse_size
#include "furnace/error.h"         // defines: Error, FURNACE_FAIL
#include "furnace/lesson.h"        // defines: StepSetup, DevicesSetup, ..., default_setup, scenario_summary
#include "furnace/process.h"       // defines: kCudaVisibleDevices, kCudaDeviceOrder
#include "furnace/stories.h"       // defines: stories
#include "furnace/topology.h"      // defines: load_topology
#include "lessons/lesson_names.h"  // defines: names::is_place
#include "lessons/step_setup.h"    // defines: read_setup

namespace furnace::lesson {
namespace detail {
namespace {

// ---- [SECTION] the keys -------------------------------------------------------------------------

using Add = std::function<void(const std::string&)>;

// One scenario key: `read` stores the value of node `n` (the key `k` of table `f`) into the setup
// (of an action that reads the key), `describe` says it for scenario_summary (in `lang` where it
// has words that are not code).
struct StepKey {
  const char* name;
  void (*read)(const Fields& f, const toml::node& n, const std::string& k, StepSetup& s);
  void (*describe)(const StepSetup& s, Lang lang, const Add& add);
};

int64_t at_least(const Fields& f, const toml::node& n, const std::string& k, int64_t min) {
  const int64_t v = f.integer_of(n, k);
  if (v < min) f.fail(&n, "'" + k + "' must be at least " + std::to_string(min) + " (got " + std::to_string(v) + ")");
  return v;
}

std::vector<int> to_ints(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

std::string ints(const std::vector<int>& v) {
  std::string out;
  for (int x : v) out += (out.empty() ? "" : ",") + std::to_string(x);
  return "[" + out + "]";
}

std::string num(double v) { return format_value(Value::of_number(v)); }

// The setup of the action that reads the key (the actions table guarantees which one).
template <class T>
T& of(StepSetup& s) { return std::get<T>(s.action); }
template <class T>
const T& of(const StepSetup& s) { return std::get<T>(s.action); }

const std::vector<StepKey>& step_keys() {
  static const std::vector<StepKey> keys = {
      {"topology",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         Scenario& sc = s.scenario();
         sc.topology = f.string_of(n, k);
         // A name, never a path: a lesson folder from elsewhere must not make Furnace open
         // "../../../../etc/passwd" (FORMAT.md: a machine in data/topologies).
         if (sc.topology.find('/') != std::string::npos || sc.topology.find(".toml") != std::string::npos)
           f.fail(&n, "topology: '" + printable_clipped(sc.topology) +
                          "' is not a name: a lesson names a machine in data/topologies, not a file");
         try {
           load_topology(sc.topology);
         } catch (const Error& e) {
           f.fail(&n, std::string("topology: ") + e.what());
         }
       },
       [](const StepSetup&, Lang, const Add&) {}},  // always said first (scenario_summary)
      {"env",
       [](const Fields& f, const toml::node& n, const std::string&, StepSetup& s) {
         if (!n.is_table()) f.fail(&n, "'env' must be a table { CUDA_VISIBLE_DEVICES = \"...\" }, got " + toml_type_name(n));
         Fields env(*n.as_table(), f.origin(), f.what() + ": env");
         env.only({kCudaVisibleDevices, kCudaDeviceOrder}, "env");
         for (auto&& [ek, ev] : *n.as_table()) s.scenario().env[std::string(ek.str())] = env.string_of(ev, ek.str());
       },
       [](const StepSetup& s, Lang, const Add& add) {
         for (const auto& [ek, ev] : s.scenario().env) add(ek + "=" + ev);
       }},
      {"set_visible_before_init",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         of<DevicesSetup>(s).set_visible_before_init = f.string_of(n, k);
       },
       [](const StepSetup& s, Lang lang, const Add& add) {
         add("os.environ['CUDA_VISIBLE_DEVICES']='" + *of<DevicesSetup>(s).set_visible_before_init +
             (lang == Lang::zh ? "'（在第一次使用设备之前）" : "' before the first device use"));
       }},
      {"set_visible_after_init",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         of<DevicesSetup>(s).set_visible_after_init = f.string_of(n, k);
       },
       [](const StepSetup& s, Lang lang, const Add& add) {
         add("os.environ['CUDA_VISIBLE_DEVICES']='" + *of<DevicesSetup>(s).set_visible_after_init +
             (lang == Lang::zh ? "'（在第一次使用设备之后）" : "' after the first device use"));
       }},
      {"set_device",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         of<DevicesSetup>(s).set_device = static_cast<int>(at_least(f, n, k, 0));
       },
       [](const StepSetup& s, Lang, const Add& add) { add("set_device(" + std::to_string(*of<DevicesSetup>(s).set_device) + ")"); }},
      {"parallel",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().parallel = f.string_of(n, k);
         if (!parse_parallel_mode(s.scenario().parallel)) f.fail(&n, "'parallel' must be \"none\", \"dp\" or \"ddp\"");
       },
       [](const StepSetup& s, Lang, const Add& add) { add("parallel " + s.scenario().parallel); }},
      {"device",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().device = static_cast<int>(at_least(f, n, k, 0));
       },
       [](const StepSetup& s, Lang, const Add& add) { add("device " + std::to_string(s.scenario().device)); }},
      {"device_ids",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().device_ids = to_ints(f.integers_of(n, k));
       },
       [](const StepSetup& s, Lang, const Add& add) { add("device_ids " + ints(*s.scenario().device_ids)); }},
      {"output_device",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().output_device = static_cast<int>(f.integer_of(n, k));
       },
       [](const StepSetup& s, Lang, const Add& add) { add("output_device " + std::to_string(*s.scenario().output_device)); }},
      {"nproc",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().nproc = static_cast<int>(at_least(f, n, k, 1));
       },
       [](const StepSetup& s, Lang, const Add& add) { add("nproc " + std::to_string(s.scenario().nproc)); }},
      {"bucket_cap_mb",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().bucket_cap_mb = f.number_of(n, k);
       },
       [](const StepSetup& s, Lang, const Add& add) { add("bucket_cap_mb " + num(s.scenario().bucket_cap_mb)); }},
      {"sampler_set_epoch",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().sampler_set_epoch = f.boolean_of(n, k);
       },
       [](const StepSetup& s, Lang, const Add& add) {
         // The lesson.toml key as it is written: the same in both languages.
         add(s.scenario().sampler_set_epoch ? "sampler.set_epoch(epoch)" : "sampler_set_epoch = false");
       }},
      {"model_device",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         const std::string v = f.string_of(n, k);
         if (!names::is_place(v)) f.fail(&n, "'" + k + "' must be \"cpu\" or \"cuda:N\" (got '" + printable(v) + "')");
         of<ForwardSetup>(s).model_device = v;
       },
       [](const StepSetup& s, Lang, const Add& add) { add("model on " + of<ForwardSetup>(s).model_device); }},
      {"input_device",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         const std::string v = f.string_of(n, k);
         if (!names::is_place(v)) f.fail(&n, "'" + k + "' must be \"cpu\" or \"cuda:N\" (got '" + printable(v) + "')");
         of<ForwardSetup>(s).input_device = v;
       },
       [](const StepSetup& s, Lang, const Add& add) { add("input on " + of<ForwardSetup>(s).input_device); }},
      {"batch",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().batch = at_least(f, n, k, 1);
       },
       [](const StepSetup& s, Lang, const Add& add) { add("batch " + std::to_string(s.scenario().batch)); }},
      {"hidden",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().hidden = to_ints(f.integers_of(n, k));
       },
       [](const StepSetup& s, Lang, const Add& add) { add("hidden " + ints(s.scenario().hidden)); }},
      {"steps",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().max_steps = at_least(f, n, k, 1);
       },
       [](const StepSetup& s, Lang, const Add& add) { add("steps " + std::to_string(s.scenario().max_steps)); }},
      {"epochs",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().epochs = static_cast<int>(at_least(f, n, k, 1));
       },
       [](const StepSetup& s, Lang, const Add& add) { add("epochs " + std::to_string(s.scenario().epochs)); }},
      {"lr",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().lr = static_cast<float>(f.number_of(n, k));
       },
       [](const StepSetup& s, Lang, const Add& add) { add("lr " + num(s.scenario().lr)); }},
      {"lr_schedule",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().lr_schedule = f.string_of(n, k);
       },
       [](const StepSetup& s, Lang, const Add& add) { add("lr_schedule " + s.scenario().lr_schedule); }},
      {"momentum",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().momentum = static_cast<float>(f.number_of(n, k));
       },
       [](const StepSetup& s, Lang, const Add& add) { add("momentum " + num(s.scenario().momentum)); }},
      {"loading",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().loading = f.string_of(n, k);
       },
       [](const StepSetup& s, Lang, const Add& add) {
         if (s.scenario().loading != "off") add("loading " + s.scenario().loading);
       }},
      {"optimizer",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().optimizer = f.string_of(n, k);
       },
       [](const StepSetup& s, Lang, const Add& add) { add("optimizer " + s.scenario().optimizer); }},
      {"weight_decay",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().weight_decay = static_cast<float>(f.number_of(n, k));
       },
       [](const StepSetup& s, Lang, const Add& add) {
         if (s.scenario().weight_decay) add("weight_decay " + num(*s.scenario().weight_decay));
       }},
      {"clip_grad_norm",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().clip_grad_norm = static_cast<float>(f.number_of(n, k));
       },
       [](const StepSetup& s, Lang, const Add& add) {
         if (s.scenario().clip_grad_norm) add("clip_grad_norm " + num(*s.scenario().clip_grad_norm));
       }},
      {"seed",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().seed = static_cast<uint64_t>(at_least(f, n, k, 0));
       },
       [](const StepSetup& s, Lang, const Add& add) { add("seed " + std::to_string(s.scenario().seed)); }},
      {"accum",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().accum = static_cast<int>(at_least(f, n, k, 1));
       },
       [](const StepSetup& s, Lang, const Add& add) { add("accum " + std::to_string(s.scenario().accum)); }},
      {"accum_divide",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().accum_divide = f.boolean_of(n, k);
       },
       [](const StepSetup& s, Lang, const Add& add) { add(s.scenario().accum_divide ? "loss / accum" : "loss NOT divided by accum"); }},
      {"amp",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().amp = f.string_of(n, k);
       },
       [](const StepSetup& s, Lang, const Add& add) { add("amp " + s.scenario().amp); }},
      {"init_scale",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().scaler.init_scale = f.number_of(n, k);
       },
       [](const StepSetup& s, Lang, const Add& add) { add("init_scale " + num(s.scenario().scaler.init_scale)); }},
      {"growth_factor",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().scaler.growth_factor = f.number_of(n, k);
       },
       [](const StepSetup& s, Lang, const Add& add) { add("growth_factor " + num(s.scenario().scaler.growth_factor)); }},
      {"backoff_factor",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().scaler.backoff_factor = f.number_of(n, k);
       },
       [](const StepSetup& s, Lang, const Add& add) { add("backoff_factor " + num(s.scenario().scaler.backoff_factor)); }},
      {"growth_interval",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().scaler.growth_interval = at_least(f, n, k, 1);
       },
       [](const StepSetup& s, Lang, const Add& add) {
         add("growth_interval " + std::to_string(s.scenario().scaler.growth_interval));
       }},
      {"overflow_at",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         of<ScalerSetup>(s).overflow_at = f.integers_of(n, k);
       },
       [](const StepSetup& s, Lang, const Add& add) {
         std::string a;
         for (int64_t x : of<ScalerSetup>(s).overflow_at) a += (a.empty() ? "" : ",") + std::to_string(x);
         add("overflow_at [" + a + "]");
       }},
      {"workers",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().workers = static_cast<int>(f.integer_of(n, k));
       },
       [](const StepSetup& s, Lang, const Add& add) { add("num_workers " + std::to_string(s.scenario().workers)); }},
      {"prefetch_factor",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().prefetch_factor = static_cast<int>(f.integer_of(n, k));
       },
       [](const StepSetup& s, Lang, const Add& add) { add("prefetch_factor " + std::to_string(s.scenario().prefetch_factor)); }},
      {"pin_memory",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         s.scenario().pin_memory = f.boolean_of(n, k);
       },
       [](const StepSetup& s, Lang, const Add& add) { add(std::string("pin_memory ") + (s.scenario().pin_memory ? "True" : "False")); }},
      {"alloc",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         std::vector<std::string>& alloc = of<MemorySetup>(s).alloc;
         alloc = f.strings_of(n, k);
         for (const std::string& a : alloc) {
           try {
             parse_size(a);
           } catch (const Error& e) {
             f.fail(&n, std::string("alloc: ") + e.what());
           }
         }
       },
       [](const StepSetup& s, Lang, const Add& add) {
         std::string a;
         for (const std::string& x : of<MemorySetup>(s).alloc) a += (a.empty() ? "" : ",") + x;
         add("alloc [" + a + "]");
       }},
      {"free",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         of<MemorySetup>(s).free = to_ints(f.integers_of(n, k));
       },
       [](const StepSetup& s, Lang, const Add& add) { add("free " + ints(of<MemorySetup>(s).free)); }},
      {"empty_cache",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         of<MemorySetup>(s).empty_cache = f.boolean_of(n, k);
       },
       [](const StepSetup& s, Lang, const Add& add) { add(of<MemorySetup>(s).empty_cache ? "empty_cache()" : "no empty_cache()"); }},
      {"story",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         std::string& story = of<MachineSetup>(s).story;
         story = f.string_of(n, k);
         std::vector<std::string> names;
         for (const auto& [name, d] : stories()) names.push_back(name);
         if (std::find(names.begin(), names.end(), story) == names.end())
           f.fail(&n, "unknown story '" + printable(story) + "' (" + suggestion(story, names) + ")");
       },
       [](const StepSetup& s, Lang, const Add& add) { add("story " + of<MachineSetup>(s).story); }},
      {"part",
       [](const Fields& f, const toml::node& n, const std::string& k, StepSetup& s) {
         of<MachineSetup>(s).part = static_cast<int>(at_least(f, n, k, 1));
       },
       [](const StepSetup& s, Lang, const Add& add) { add("part " + std::to_string(of<MachineSetup>(s).part)); }},
  };
  return keys;
}

const StepKey* find_key(std::string_view name) {
  for (const StepKey& k : step_keys())
    if (name == k.name) return &k;
  return nullptr;
}

// The position of a key in FORMAT.md's table (the order the keys take effect).
size_t rank(const std::string& name) {
  const std::vector<StepKey>& keys = step_keys();
  return static_cast<size_t>(std::find_if(keys.begin(), keys.end(), [&](const StepKey& k) { return name == k.name; }) -
                             keys.begin());
}

}  // namespace

// ---- [SECTION] reading a step's scenario --------------------------------------------------------

StepSetup read_setup(const Fields* f, const ActionInfo& action) {
  StepSetup s = default_setup(action.name);
  if (!f) return s;
  Scenario& sc = s.scenario();
  std::vector<std::string> all;
  for (const StepKey& k : step_keys()) all.emplace_back(k.name);
  for (auto&& [key, node] : f->table()) {
    const std::string k(key.str());
    const StepKey* known = find_key(k);
    if (!known) f->fail(&node, "unknown scenario key '" + printable(k) + "' (" + suggestion(k, all) + ")");
    if (std::find(action.keys.begin(), action.keys.end(), k) == action.keys.end()) {
      std::string used;
      for (const std::string& a : action.keys) used += (used.empty() ? "" : ", ") + a;
      f->fail(&node, "scenario key '" + k + "' is not used by action '" + action.name + "' (it reads: " + used + ")");
    }
    s.keys.push_back(k);
    known->read(*f, node, k, s);
  }
  // TOML tables come back sorted by name; keep the keys in the order they take effect (FORMAT.md's
  // table): "free [0,2], empty_cache()" rather than "empty_cache(), free [0,2]".
  std::stable_sort(s.keys.begin(), s.keys.end(), [](const std::string& a, const std::string& b) { return rank(a) < rank(b); });
  // DistributedDataParallel starts processes of a training run: the train action alone runs it.
  if (parse_parallel_mode(sc.parallel) == ParallelMode::ddp && action.name != "train")
    f->fail(f->find("parallel"), "'parallel = \"ddp\"' is for action 'train' only (action '" + action.name + "' runs one process)");
  // What the CLI does too: model.cuda(device_ids[0]) before wrapping, unless `device` is given.
  if (parse_parallel_mode(sc.parallel) == ParallelMode::dp && sc.device_ids && !sc.device_ids->empty() &&
      std::find(s.keys.begin(), s.keys.end(), "device") == s.keys.end())
    sc.device = std::max(0, sc.device_ids->front());
  if (const MemorySetup* m = s.as<MemorySetup>()) {
    if (m->alloc.empty()) f->fail(nullptr, "action 'memory' needs 'alloc' (sizes to allocate)");
    std::set<int> freed;
    for (int i : m->free)
      if (i < 0 || static_cast<size_t>(i) >= m->alloc.size() || !freed.insert(i).second)
        f->fail(f->find("free"), "'free': index " + std::to_string(i) + " is out of range or repeated (alloc has " +
                                     std::to_string(m->alloc.size()) + " sizes)");
  }
  if (const MachineSetup* m = s.as<MachineSetup>(); m && m->story.empty()) f->fail(nullptr, "action 'machine' needs 'story'");
  if (const ScalerSetup* scaler = s.as<ScalerSetup>())
    for (int64_t step : scaler->overflow_at)
      if (step < 1 || step > sc.max_steps)
        f->fail(f->find("overflow_at"), "'overflow_at': step " + std::to_string(step) + " is outside 1.." + std::to_string(sc.max_steps));
  try {
    sc.validate();
  } catch (const Error& e) {
    f->fail(nullptr, std::string("scenario: ") + e.what());
  }
  return s;
}

}  // namespace detail

StepSetup default_setup(std::string_view action) {
  // The lesson defaults (FORMAT.md): the article's 4-GPU server, a few steps on the data slice.
  Scenario sc;
  sc.topology = "workstation-4x3090";
  sc.epochs = 1;
  sc.max_steps = action == "scaler" ? 20 : 3;
  sc.lr_schedule = "constant";
  sc.evaluate = false;
  sc.batch = action == "forward" ? 8 : action == "dp-loss-trap" ? 10 : 256;
  StepSetup s;
  if (action == "devices") s.action = DevicesSetup{sc};
  else if (action == "forward") s.action = ForwardSetup{sc};
  else if (action == "train") s.action = TrainSetup{sc};
  else if (action == "memory") s.action = MemorySetup{sc};
  else if (action == "dp-loss-trap") {  // DataParallel by definition: its device_ids need that mode
    sc.parallel = "dp";
    s.action = LossTrapSetup{sc};
  }
  else if (action == "scaler") s.action = ScalerSetup{sc};
  else if (action == "machine") s.action = MachineSetup{sc};
  else if (action == "loader") s.action = LoaderSetup{sc};
  else FURNACE_FAIL() << "unknown action '" << printable(action) << "'";
  return s;
}

// ---- [SECTION] the summary ----------------------------------------------------------------------

std::string scenario_summary(const Step& step, Lang lang) {
  const StepSetup& s = step.setup;
  std::string out = step.action + ":";
  bool first = true;
  const detail::Add add = [&](const std::string& text) {
    out += (first ? " " : ", ") + text;
    first = false;
  };
  if (!s.as<ScalerSetup>() && !s.as<LoaderSetup>()) add("topology " + s.scenario().topology);
  for (const std::string& k : s.keys)
    if (const detail::StepKey* key = detail::find_key(k)) key->describe(s, lang, add);
  return out;
}

}  // namespace furnace::lesson

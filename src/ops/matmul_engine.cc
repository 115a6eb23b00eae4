// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "ops/matmul_engine.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <list>
#include <mutex>
#include <new>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <unordered_map>
#include <vector>

#include "collectives/group_state.h"
#include "core/check.h"
#include "core/config.h"
#include "core/cpu_quota.h"
#include "core/logging.h"
#include "core/storage.h"
#include "device/kernels.h"
#include "shmccl/process_group.hpp"

namespace shmccl::ops {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;

// Whether oneDNN builds a bfloat16 matmul here: a small primitive descriptor, once per process.
bool probe_native_bfloat16() {
  try {
    const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    const memory::desc a({4, 8}, memory::data_type::bf16, Tag::ab);
    const memory::desc b({8, 4}, memory::data_type::bf16, Tag::any);
    const memory::desc c({4, 4}, memory::data_type::f32, Tag::ab);
    dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), engine);
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

// The data type of both operands in oneDNN's GEMM (see MatmulEngine::operand_dtype).
memory::data_type dnnl_type(ScalarType dtype) {
  switch (MatmulEngine::operand_dtype(dtype)) {
    case kFloat32:
      return memory::data_type::f32;
    case kBFloat16:
      return memory::data_type::bf16;
    default:
      throw InvalidArgument(detail::concat("matmul: unsupported dtype ", dtype));
  }
}

// threads is part of the key: oneDNN's brgemm matmul divides its work when the primitive is
// made, for the OpenMP team size of that moment, so a primitive made on one thread runs on one
// thread ever after (a [512, 2048] x [2048, 1024] bfloat16 GEMM: 6.0 ms where 2 threads take 3.1).
struct PrimitiveKey {
  int64_t m, k, n, lda;
  ScalarType dtype;
  bool reordered_weights;
  int threads;
  bool operator==(const PrimitiveKey&) const = default;
};

struct PrimitiveKeyHash {
  size_t operator()(const PrimitiveKey& key) const noexcept {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v :
         {key.m, key.k, key.n, key.lda, static_cast<int64_t>(key.dtype),
          static_cast<int64_t>(key.reordered_weights), static_cast<int64_t>(key.threads)}) {
      h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    }
    return static_cast<size_t>(h);
  }
};

struct CachedPrimitive {
  dnnl::matmul primitive;
  memory::desc a_desc, weights_desc, plain_weights_desc, c_desc, scratchpad_desc;
};

// One weight tensor in the layout a primitive wants.
struct CachedWeight {
  const detail::Storage* storage;
  std::weak_ptr<detail::Storage> alive;  // the address may be reused once the storage is gone
  size_t offset;
  int64_t k, n;
  ScalarType dtype;
  uint64_t version;
  memory::desc desc;
  memory reordered;
  uint64_t bytes;
};

constexpr size_t kMaxPrimitives = 4096;

// A thread's source, destination and scratchpad memory objects for one primitive.
struct ThreadMemories {
  std::weak_ptr<const CachedPrimitive> primitive;  // the entry may be dropped from the cache
  memory a, c, scratchpad;
};

// This thread's scratchpad, of at least `bytes`. Primitives are shared by every thread, and
// oneDNN's own scratchpad (DNNL_ENABLE_CONCURRENT_EXEC is off in Debian's build) belongs to the
// thread that created the primitive: two threads running GEMMs at once would share it. Each
// execution brings its own instead (scratchpad_mode::user).
void* thread_scratchpad(size_t bytes) {
  struct Buffer {
    void* data = nullptr;
    size_t bytes = 0;
    ~Buffer() { std::free(data); }
  };
  thread_local Buffer buffer;
  if (bytes > buffer.bytes) {
    constexpr size_t kPage = 4096;
    const size_t rounded = (bytes + kPage - 1) / kPage * kPage;
    void* data = std::aligned_alloc(kPage, rounded);
    if (data == nullptr) throw std::bad_alloc();
    std::free(buffer.data);
    buffer.data = data;
    buffer.bytes = rounded;
  }
  return buffer.data;
}

// Sets this thread's OpenMP team size for a GEMM and puts the caller's back after it: a
// synchronous call runs on the caller's own thread, whose parallel regions are its own business.
class OmpThreads {
 public:
  explicit OmpThreads(int threads) : saved_(omp_get_max_threads()) {
    if (threads != saved_) omp_set_num_threads(threads);
  }
  ~OmpThreads() {
    if (omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
  }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  const int saved_;
};

// GNU OpenMP's thread pool does not survive fork(): a child that runs a parallel region on the
// pool its parent started hangs. After such a fork the child's GEMMs run on one thread.
std::atomic<bool> g_pool_started{false};
std::atomic<bool> g_forked_after_pool{false};

void note_pool_started() {
  static std::once_flag once;
  std::call_once(once, [] {
    pthread_atfork(nullptr, nullptr, [] {
      if (g_pool_started.load(std::memory_order_relaxed)) {
        g_forked_after_pool.store(true, std::memory_order_relaxed);
      }
    });
  });
  g_pool_started.store(true, std::memory_order_relaxed);
}

}  // namespace

struct MatmulEngine::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  mutable std::mutex mutex;
  std::unordered_map<PrimitiveKey, std::shared_ptr<const CachedPrimitive>, PrimitiveKeyHash>
      primitives;
  std::list<CachedWeight> weights;  // most recently used first
  uint64_t weight_bytes = 0;
  std::atomic<uint64_t> weight_budget{config::get_bytes("SHMCCL_OPS_WEIGHT_CACHE_BYTES")};
  Stats stats;
  std::function<void()> reorder_hook_for_testing;  // guarded by mutex

  std::function<void()> reorder_hook() const {
    std::lock_guard<std::mutex> lock(mutex);
    return reorder_hook_for_testing;
  }

  ThreadMemories& thread_memories(const std::shared_ptr<const CachedPrimitive>& primitive) {
    thread_local std::unordered_map<const CachedPrimitive*, ThreadMemories> memories;
    auto found = memories.find(primitive.get());
    // A freed entry's address may come back for a new primitive: check it is still the same.
    if (found != memories.end() && found->second.primitive.lock() == primitive) {
      return found->second;
    }
    if (memories.size() >= kMaxPrimitives) memories.clear();
    ThreadMemories& entry = memories[primitive.get()];
    entry = ThreadMemories{primitive, memory(primitive->a_desc, engine, DNNL_MEMORY_NONE),
                           memory(primitive->c_desc, engine, DNNL_MEMORY_NONE),
                           primitive->scratchpad_desc.get_size() > 0
                               ? memory(primitive->scratchpad_desc, engine, DNNL_MEMORY_NONE)
                               : memory()};
    return entry;
  }

  dnnl::stream& thread_stream() {
    thread_local std::optional<dnnl::stream> stream;
    if (!stream) stream.emplace(engine);
    return *stream;
  }

  std::shared_ptr<const CachedPrimitive> primitive(const PrimitiveKey& key) {
    std::lock_guard<std::mutex> lock(mutex);
    auto found = primitives.find(key);
    if (found != primitives.end()) return found->second;
    if (primitives.size() >= kMaxPrimitives) primitives.clear();
    const memory::data_type type = dnnl_type(key.dtype);
    memory::desc a_desc({key.m, key.k}, type, memory::dims{key.lda, 1});
    memory::desc plain_weights({key.k, key.n}, type, Tag::ab);
    memory::desc weights_query =
        key.reordered_weights ? memory::desc({key.k, key.n}, type, Tag::any) : plain_weights;
    memory::desc c_desc({key.m, key.n}, memory::data_type::f32, Tag::ab);
    dnnl::primitive_attr attributes;
    attributes.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_desc, weights_query, c_desc), attributes,
                                    engine);
    auto entry = std::make_shared<const CachedPrimitive>(CachedPrimitive{
        dnnl::matmul(pd), a_desc, pd.weights_desc(), plain_weights, c_desc, pd.scratchpad_desc()});
    ++stats.primitives_created;
    primitives.emplace(key, entry);
    return entry;
  }

  // The weight in `desc`'s layout, reordered (and converted from float16) at most once per
  // version of the weight tensor.
  memory cached_weight(const Tensor& weight, const MatmulShape& shape, const memory::desc& desc,
                       const memory::desc& plain_desc) {
    const detail::Storage* storage = weight.storage().get();
    const size_t offset = weight.storage_offset_bytes();
    const uint64_t version = weight.version();
    auto same_weight = [&](const CachedWeight& cached) {
      return cached.storage == storage && cached.offset == offset && cached.k == shape.k &&
             cached.n == shape.n && cached.dtype == shape.dtype && cached.desc == desc;
    };
    {
      std::lock_guard<std::mutex> lock(mutex);
      for (auto it = weights.begin(); it != weights.end(); ++it) {
        if (!same_weight(*it)) continue;
        if (it->alive.expired() || it->version != version) {
          weight_bytes -= it->bytes;
          weights.erase(it);
          break;
        }
        weights.splice(weights.begin(), weights, it);
        ++stats.weight_cache_hits;
        return weights.front().reordered;
      }
    }
    // Reorder outside the lock: other threads' GEMMs need not wait for it.
    std::vector<float> converted;
    void* source = weight.data_ptr();
    if (operand_dtype(shape.dtype) != shape.dtype) {  // widened to float32
      converted.resize(static_cast<size_t>(shape.k * shape.n));
      kernels::cast(converted.data(), kFloat32, source, shape.dtype, converted.size());
      source = converted.data();
    }
    memory plain(plain_desc, engine, source);
    memory reordered(desc, engine);
    dnnl::stream& stream = thread_stream();
    dnnl::reorder(plain, reordered).execute(stream, plain, reordered);
    stream.wait();
    if (std::function<void()> hook = reorder_hook()) hook();
    const uint64_t bytes = desc.get_size();
    std::lock_guard<std::mutex> lock(mutex);
    const uint64_t budget = weight_budget.load();
    ++stats.weight_reorders;
    if (bytes > budget) return reordered;  // used once, not kept
    // Threads that missed on one weight at once each reordered it: the cache keeps one entry, of
    // the newest version (an entry of an expired storage at the same address is stale).
    for (auto it = weights.begin(); it != weights.end(); ++it) {
      if (!same_weight(*it)) continue;
      if (!it->alive.expired() && it->version >= version) return reordered;
      weight_bytes -= it->bytes;
      weights.erase(it);
      break;
    }
    while (weight_bytes + bytes > budget && !weights.empty()) {
      weight_bytes -= weights.back().bytes;
      weights.pop_back();
    }
    weights.push_front(CachedWeight{storage, weight.storage(), offset, shape.k, shape.n,
                                    shape.dtype, version, desc, reordered, bytes});
    weight_bytes += bytes;
    return reordered;
  }
};

MatmulEngine& MatmulEngine::instance() {
  static MatmulEngine* engine = new MatmulEngine();  // never destroyed: used until exit
  return *engine;
}

MatmulEngine::MatmulEngine() : impl_(std::make_unique<Impl>()) {}
MatmulEngine::~MatmulEngine() = default;

void MatmulEngine::matmul(const MatmulShape& shape, const void* a, int64_t lda,
                          const Tensor& weight, float* c, int threads) {
  SHMCCL_CHECK(shape.m >= 0 && shape.k >= 0 && shape.n >= 0, "matmul: negative shape");
  if (shape.m == 0 || shape.n == 0) return;
  if (shape.k == 0) {
    std::fill(c, c + shape.m * shape.n, 0.0f);
    return;
  }
  try {
    // Before any oneDNN work (the weight reorder too): it runs on this thread's OpenMP team.
    if (threads > 1) {
      if (g_forked_after_pool.load(std::memory_order_relaxed)) {
        threads = 1;
      } else {
        note_pool_started();
      }
    }
    const OmpThreads team(threads);
    // Widened weights are always converted (and so cached); the others only with a cache budget.
    const bool reorder = operand_dtype(shape.dtype) != shape.dtype || impl_->weight_budget > 0;
    const PrimitiveKey key{shape.m, shape.k, shape.n, lda, shape.dtype, reorder, threads};
    const std::shared_ptr<const CachedPrimitive> cached = impl_->primitive(key);
    const CachedPrimitive& entry = *cached;
    memory weights_memory =
        reorder ? impl_->cached_weight(weight, shape, entry.weights_desc, entry.plain_weights_desc)
                : memory(entry.plain_weights_desc, impl_->engine, weight.data_ptr());
    // Memory objects are made once per thread and primitive and re-pointed per call: creating
    // them cost about as much as a seed-sized GEMM's arithmetic.
    ThreadMemories& memories = impl_->thread_memories(cached);
    memories.a.set_data_handle(const_cast<void*>(a));
    memories.c.set_data_handle(c);
    std::unordered_map<int, memory> arguments{
        {DNNL_ARG_SRC, memories.a}, {DNNL_ARG_WEIGHTS, weights_memory}, {DNNL_ARG_DST, memories.c}};
    if (const size_t scratchpad_bytes = entry.scratchpad_desc.get_size(); scratchpad_bytes > 0) {
      memories.scratchpad.set_data_handle(thread_scratchpad(scratchpad_bytes));
      arguments.emplace(DNNL_ARG_SCRATCHPAD, memories.scratchpad);
    }
    dnnl::stream& stream = impl_->thread_stream();
    entry.primitive.execute(stream, arguments);
    stream.wait();
  } catch (const dnnl::error& error) {
    // shmccl's errors only leave the library (docs/errors.md); this one names the GEMM.
    const std::string what =
        detail::concat("matmul [", shape.m, ", ", shape.k, "] x [", shape.k, ", ", shape.n, "] of ",
                       shape.dtype, ": oneDNN failed: ", error.what());
    if (error.status == dnnl_out_of_memory) throw OutOfMemoryError(what);
    throw Error(what);
  }
}

bool MatmulEngine::native_bfloat16() {
  static const bool native = probe_native_bfloat16();
  return native;
}

ScalarType MatmulEngine::operand_dtype(ScalarType dtype) {
  if (dtype == kFloat16 || (dtype == kBFloat16 && !native_bfloat16())) return kFloat32;
  return dtype;
}

MatmulEngine::Stats MatmulEngine::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  Stats stats = impl_->stats;
  stats.weight_cache_bytes = impl_->weight_bytes;
  return stats;
}

void MatmulEngine::set_reorder_hook_for_testing(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->reorder_hook_for_testing = std::move(hook);
}

void MatmulEngine::clear_caches() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->primitives.clear();
  impl_->weights.clear();
  impl_->weight_bytes = 0;
  impl_->weight_budget = config::get_bytes("SHMCCL_OPS_WEIGHT_CACHE_BYTES");
}

namespace {

// How many of the job's ranks may run on a CPU this rank may run on (itself included), from the
// CPU sets in the default group's control block; 0 before init_process_group.
int ranks_sharing_my_cpus() {
  if (!is_initialized()) return 0;
  const transport::GroupTransport& world = default_group()->state().transport();
  const transport::RankSlot& mine = world.slot(world.rank());
  int sharing = 0;
  for (int r = 0; r < world.size(); ++r) {
    const transport::RankSlot& slot = world.slot(r);
    for (size_t word = 0; word < transport::kCpuMaskWords; ++word) {
      if ((slot.cpus[word] & mine.cpus[word]) != 0) {
        ++sharing;
        break;
      }
    }
  }
  return sharing;
}

int cpus_to_run_on() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
}

}  // namespace

int cpu_share_of(int cpus, int sharing, int online, int ranks, int quota) {
  int mine = cpus;
  if (sharing > 0) {
    mine = cpus / sharing;
  } else if (!(online > 0 && cpus < online) && ranks > 0) {
    mine = cpus / ranks;  // unbound, as far as a rank can tell alone
  }
  // A cgroup's CPU limit (a container's --cpus) is the job's to share as well: GEMM threads
  // beyond it only get every rank throttled.
  if (quota > 0 && ranks > 0) mine = std::min(mine, quota / ranks);
  return std::max(1, mine);
}

int cpu_share() {
  static std::atomic<int> known{0};
  if (const int share = known.load(std::memory_order_relaxed); share > 0) [[likely]]
    return share;
  if (const int64_t configured = config::get_int("SHMCCL_OPS_CPU_SHARE"); configured > 0) {
    const int share = static_cast<int>(std::min<int64_t>(configured, 1 << 20));
    known.store(share, std::memory_order_relaxed);
    return share;
  }
  const int cpus = cpus_to_run_on();
  const int online = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  const int quota = detail::cpu_quota_cores();
  if (const int sharing = ranks_sharing_my_cpus(); sharing > 0) {
    const int share = cpu_share_of(cpus, sharing, online, get_world_size(), quota);
    known.store(share, std::memory_order_relaxed);
    return share;
  }
  int ranks = 0;
  for (const char* name : {"LOCAL_WORLD_SIZE", "WORLD_SIZE"}) {
    if (const char* value = std::getenv(name); value != nullptr && std::atoi(value) > 0) {
      ranks = std::atoi(value);
      break;
    }
  }
  // Not kept: a GEMM before init_process_group must not fix for good the share of a rank that
  // then learns who shares its CPUs.
  return cpu_share_of(cpus, 0, online, ranks > 0 ? ranks : 1, quota);
}

int gemm_threads(int cpus) {
  const int64_t configured = config::get_int("SHMCCL_OPS_THREADS");
  return configured > 0 ? static_cast<int>(configured) : std::max(1, cpus);
}

}  // namespace shmccl::ops

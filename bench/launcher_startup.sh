#!/usr/bin/env bash
# Start-up overhead of shmrun: `shmrun --nproc-per-node N true` against a plain loop that
# fork/execs N `true` processes and waits for them, both timed by the same small C++ harness
# (compiled on the fly) so neither side pays a shell's fork costs.
#
#   bench/launcher_startup.sh [path/to/shmrun] [ranks=4] [iterations=300]
set -euo pipefail

shmrun=${1:-$(dirname "$0")/../build/src/launcher/shmrun}
ranks=${2:-4}
iterations=${3:-300}
[[ -x $shmrun ]] || { echo "no shmrun at $shmrun (pass its path)" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/harness.cc" <<'CC'
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

extern char** environ;

// Output goes to /dev/null, so the console costs nothing on either side.
static pid_t spawn(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) != 0) std::exit(1);
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

static void wait_ok(pid_t pid) {
  int status;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "child failed\n");
    std::exit(1);
  }
}

// Plain fork/exec, as a minimal launcher would do it.
static void fork_exec_loop(int ranks) {
  std::vector<pid_t> pids;
  for (int i = 0; i < ranks; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      execl("/bin/true", "true", nullptr);
      _exit(127);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) wait_ok(pid);
}

static double children_cpu_us() {
  rusage usage;
  getrusage(RUSAGE_CHILDREN, &usage);
  return (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1e6 + usage.ru_utime.tv_usec +
         usage.ru_stime.tv_usec;
}

struct Samples {
  std::vector<double> wall;  // sorted, microseconds
  double cpu_per_run;        // user + system of every process involved (waited-for descendants)
};

// Wall time is at the mercy of other load on a shared machine; CPU time much less so.
template <typename F>
static Samples time_us(int iterations, F f) {
  Samples samples;
  const double cpu_start = children_cpu_us();
  for (int i = 0; i < iterations; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    samples.wall.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  samples.cpu_per_run = (children_cpu_us() - cpu_start) / iterations;
  std::sort(samples.wall.begin(), samples.wall.end());
  return samples;
}

int main(int argc, char** argv) {
  const std::string shmrun = argv[1];
  const int ranks = std::atoi(argv[2]), iterations = std::atoi(argv[3]);
  auto report = [](const char* name, const Samples& samples) {
    const auto& s = samples.wall;
    std::printf("%-38s wall median %6.0f us (p10 %6.0f, p90 %6.0f)   cpu %6.0f us\n", name,
                s[s.size() / 2], s[s.size() / 10], s[s.size() * 9 / 10], samples.cpu_per_run);
    return std::pair{s[s.size() / 2], samples.cpu_per_run};
  };
  const std::string n = std::to_string(ranks);
  // Interleave warm-up of both, then measure each.
  for (int i = 0; i < 10; ++i) {
    fork_exec_loop(ranks);
    wait_ok(spawn({shmrun, "--nproc-per-node", n, "/bin/true"}));
  }
  const auto plain = time_us(iterations, [&] { fork_exec_loop(ranks); });
  const auto launched = time_us(iterations, [&] {
    wait_ok(spawn({shmrun, "--nproc-per-node", n, "/bin/true"}));
  });
  const auto empty = time_us(iterations, [&] { wait_ok(spawn({shmrun, "--version"})); });
  const auto [a, a_cpu] = report(("fork/exec loop, " + n + " x true").c_str(), plain);
  const auto [b, b_cpu] = report(("shmrun --nproc-per-node " + n + " true").c_str(), launched);
  report("shmrun --version (exec + exit only)", empty);
  std::printf("shmrun overhead over the plain loop: wall %.0f us (%.1fx), cpu %.0f us\n", b - a,
              b / a, b_cpu - a_cpu);
}
CC
g++ -O2 -std=c++20 -o "$work/harness" "$work/harness.cc"
echo "ranks=$ranks iterations=$iterations cpus=$(nproc) load=$(cut -d' ' -f1 /proc/loadavg)"
"$work/harness" "$shmrun" "$ranks" "$iterations"

// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The program the launcher tests start under shmrun. Every mode first does what a shmccl rank
// does at start-up (takes LOCK_SH on SHMCCL_LOCK_FD, creates a segment
// /dev/shm/shmccl.$SHMCCL_NAMESPACE.test<rank>) so each test can check that shmrun cleans up.
//   env                  print the launcher's variables as NAME=value lines
//   sleep                print "ready", then wait to be killed
//   ignore-stop          ignore SIGTERM, SIGINT, SIGHUP and SIGQUIT, print "ready", then wait
//                        to be killed
//   exit CODE RANK       rank RANK exits CODE at once; the others print "ready" and wait
//   signal SIG RANK      rank RANK kills itself with SIG; the others print "ready" and wait
//   lines N              print N lines on stdout and N on stderr
//   error-file RANK      rank RANK writes a torch-style error file (what torch's @record writes
//                        for a Python RuntimeError) to TORCHELASTIC_ERROR_FILE and exits 1; the
//                        others print "ready" and wait
//   partial              print a line without its '\n'
//   attempts FILE N      rank 0 appends to FILE and fails (exit 1) while FILE has <= N lines
//   affinity             print "cpus=<list>" from sched_getaffinity
//   report-signals       print "ready"; on SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 or SIGUSR2
//                        print "got SIG<name>" and exit 0
//   fail-and-report RANK rank RANK exits 3 once the others are ready; they report-signals
//   fail-and-keep-reporting RANK  as fail-and-report, but the others report every signal and
//                        go on (only SIGKILL ends them)
//   flood RANK           rank RANK exits 3 at once; the others write lines without pause
//   flood-both           write lines without pause, on stdout and stderr in turn
//   flood-until-usr2 RANK  rank RANK says so on stderr and exits 3 once it receives SIGUSR2;
//                        the others write lines without pause
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace {

int my_rank() {
  const char* rank = std::getenv("RANK");
  return rank != nullptr ? std::atoi(rank) : -1;
}

void start_like_a_rank() {
  if (const char* fd = std::getenv("SHMCCL_LOCK_FD"); fd != nullptr) {
    if (flock(std::atoi(fd), LOCK_SH) != 0) {
      std::perror("test_worker: flock(SHMCCL_LOCK_FD)");
      std::exit(90);
    }
  }
  if (const char* ns = std::getenv("SHMCCL_NAMESPACE"); ns != nullptr) {
    const std::string path =
        std::string("/dev/shm/shmccl.") + ns + ".test" + std::to_string(my_rank());
    const int fd = open(path.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
      std::perror(("test_worker: create " + path).c_str());
      std::exit(91);
    }
    close(fd);
  }
}

// Whether report_signal exits after reporting (it does unless a mode says otherwise).
volatile sig_atomic_t g_exit_on_signal = 1;

void report_signal(int signal_number) {
  // Async-signal-safe: one write(2) of a line made without allocating.
  char line[32] = "got SIG";
  const char* name = sigabbrev_np(signal_number);
  size_t length = 7;
  for (const char* c = name != nullptr ? name : "?"; *c != '\0' && length < sizeof(line) - 2; ++c)
    line[length++] = *c;
  line[length++] = '\n';
  [[maybe_unused]] ssize_t written = write(STDOUT_FILENO, line, length);
  if (g_exit_on_signal) _exit(0);
}

// Prints "ready", then reports each of SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 (and
// exits after the first, unless g_exit_on_signal is 0). `armed` runs once they are caught. They
// are taken with sigwait, not by a handler interrupting pause(): ThreadSanitizer's runtime defers
// a signal that lands while it is in control, and a CI run of that build saw a rank blocked in
// pause() print nothing and run on until shmrun's SIGKILL.
template <typename Armed>
[[noreturn]] void report_signals_forever(Armed armed) {
  sigset_t reported;
  sigemptyset(&reported);
  for (int signal_number : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2})
    sigaddset(&reported, signal_number);
  sigprocmask(SIG_BLOCK, &reported, nullptr);
  armed();
  std::printf("ready rank=%d pid=%d\n", my_rank(), static_cast<int>(getpid()));
  std::fflush(stdout);
  while (true) {
    int received = 0;
    if (sigwait(&reported, &received) == 0) report_signal(received);
  }
}

[[noreturn]] void wait_forever() {
  std::printf("ready rank=%d pid=%d\n", my_rank(), static_cast<int>(getpid()));
  std::fflush(stdout);
  while (true)
    pause();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: test_worker MODE [ARGS]\n");
    return 64;
  }
  start_like_a_rank();
  const std::string mode = argv[1];
  const int rank = my_rank();
  if (mode == "env") {
    for (const char* name : {"RANK",
                             "LOCAL_RANK",
                             "WORLD_SIZE",
                             "LOCAL_WORLD_SIZE",
                             "GROUP_RANK",
                             "ROLE_RANK",
                             "ROLE_WORLD_SIZE",
                             "ROLE_NAME",
                             "MASTER_ADDR",
                             "MASTER_PORT",
                             "TORCHELASTIC_RESTART_COUNT",
                             "TORCHELASTIC_MAX_RESTARTS",
                             "TORCHELASTIC_RUN_ID",
                             "SHMCCL_JOB_ID",
                             "SHMCCL_NAMESPACE",
                             "SHMCCL_TIMEOUT",
                             "SHMCCL_LAUNCHER_PID",
                             "SHMCCL_LOCK_FD",
                             "ASCEND_RT_VISIBLE_DEVICES",
                             "OMP_NUM_THREADS",
                             "TORCHELASTIC_ERROR_FILE"}) {
      const char* value = std::getenv(name);
      std::printf("%s=%s\n", name, value != nullptr ? value : "<unset>");
    }
    std::printf("PPID=%d\n", static_cast<int>(getppid()));
    return 0;
  }
  if (mode == "fds") {  // the fds this rank was started with
    std::string fds;
    DIR* directory = opendir("/proc/self/fd");
    while (const dirent* entry = directory != nullptr ? readdir(directory) : nullptr) {
      if (entry->d_name[0] == '.' || std::atoi(entry->d_name) == dirfd(directory)) continue;
      fds += std::string(fds.empty() ? "" : ",") + entry->d_name;
    }
    if (directory != nullptr) closedir(directory);
    std::printf("fds=%s\n", fds.c_str());
    return 0;
  }
  // Rank 0 leaves a child behind that ends right after it (an orphan: shmrun --reap-orphans must
  // reap it), and writes its pid to argv[2]; rank 1 waits for that child to be reaped (gone from
  // /proc: a zombie stays there) and says whether it was.
  if (mode == "orphan" && argc == 3) {
    const std::string pid_file = argv[2];
    if (rank == 0) {
      int ends[2];
      if (pipe(ends) != 0) return 70;
      const pid_t orphan = fork();
      if (orphan < 0) return 71;
      if (orphan == 0) {
        close(ends[1]);
        char byte;
        while (read(ends[0], &byte, 1) != 0) {  // EOF once the rank is gone
        }
        const std::string temporary = pid_file + ".tmp";
        if (FILE* file = std::fopen(temporary.c_str(), "w")) {
          std::fprintf(file, "%d\n", static_cast<int>(getpid()));
          std::fclose(file);
          std::rename(temporary.c_str(), pid_file.c_str());
        }
        _exit(0);
      }
      std::printf("left pid %d behind\n", static_cast<int>(orphan));
      return 0;
    }
    long orphan = 0;
    for (int i = 0; i < 2000 && orphan == 0; ++i) {  // 20 s at most
      std::ifstream file(pid_file);
      if (!(file >> orphan)) orphan = 0;
      if (orphan == 0) usleep(10000);
    }
    if (orphan == 0) {
      std::printf("no orphan pid\n");
      return 1;
    }
    const std::string proc = "/proc/" + std::to_string(orphan);
    for (int i = 0; i < 2000; ++i) {
      if (access(proc.c_str(), F_OK) != 0) {
        std::printf("orphan %ld reaped\n", orphan);
        return 0;
      }
      usleep(10000);
    }
    std::printf("orphan %ld not reaped\n", orphan);
    return 1;
  }
  if (mode == "sleep") wait_forever();
  if (mode == "report-signals") report_signals_forever([] {});
  if ((mode == "fail-and-report" || mode == "fail-and-keep-reporting") && argc == 3) {
    g_exit_on_signal = mode == "fail-and-report";
    if (rank == std::atoi(argv[2])) {
      // Fails once every other rank takes the signals: each made its segment, then blocked
      // them for sigwait, then made a file of its own (so shmrun's stop reaches a reporting rank).
      const char* ns = std::getenv("SHMCCL_NAMESPACE");
      const int world = std::atoi(std::getenv("WORLD_SIZE"));
      for (int other = 0; ns != nullptr && other < world; ++other) {
        if (other == rank) continue;
        const std::string ready =
            std::string("/dev/shm/shmccl.") + ns + ".ready" + std::to_string(other);
        while (access(ready.c_str(), F_OK) != 0)
          usleep(1000);
      }
      return 3;
    }
    report_signals_forever([rank] {
      if (const char* ns = std::getenv("SHMCCL_NAMESPACE"); ns != nullptr) {
        const std::string ready =
            std::string("/dev/shm/shmccl.") + ns + ".ready" + std::to_string(rank);
        close(open(ready.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600));
      }
    });
  }
  if (mode == "grandchild" && argc == 4) {
    // Starts a process of its own (as a shell script or a data loader would). Then rank argv[2]
    // fails, but only once the other rank has started its own: they meet on the FIFO argv[3]
    // (opening a FIFO blocks until both ends are open).
    const pid_t child = fork();
    if (child == 0) wait_forever();
    std::printf("grandchild %d\n", static_cast<int>(child));
    std::fflush(stdout);
    const bool failing = rank == std::atoi(argv[2]);
    const int fifo = open(argv[3], failing ? O_RDONLY : O_WRONLY);
    if (fifo < 0) return 98;
    if (failing) return 3;
    wait_forever();
  }
  if (mode == "wrapper") {
    // A wrapper script's shape: the rank dies of SIGTERM at once, while the process it started
    // handles it, taking 300 ms (a checkpoint saved), then says so on the rank's stdout.
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigprocmask(SIG_BLOCK, &term, nullptr);
    if (fork() == 0) {
      int received = 0;
      sigwait(&term, &received);
      usleep(300 * 1000);
      std::printf("rank %d's child saved its state\n", rank);
      std::fflush(stdout);
      _exit(0);
    }
    sigprocmask(SIG_UNBLOCK, &term, nullptr);
    wait_forever();
  }
  if (mode == "ignore-stop") {
    for (int signal_number : {SIGTERM, SIGINT, SIGHUP, SIGQUIT})
      signal(signal_number, SIG_IGN);
    wait_forever();
  }
  if ((mode == "exit" || mode == "signal") && argc == 4) {
    if (rank != std::atoi(argv[3])) wait_forever();
    if (mode == "exit") return std::atoi(argv[2]);
    std::printf("raising signal %s\n", argv[2]);
    std::fflush(stdout);
    raise(std::atoi(argv[2]));
    return 99;
  }
  if (mode == "error-file" && argc == 3) {
    if (rank == std::atoi(argv[2])) {
      std::ofstream(std::getenv("TORCHELASTIC_ERROR_FILE"))
          << R"({"message": {"message": "RuntimeError: loss is NaN", "extraInfo": {)"
          << R"("py_callstack": "Traceback (most recent call last):\n  File \"train.py\", )"
          << R"(line 3, in <module>\nRuntimeError: loss is NaN\n", "timestamp": "1700000000"}}})";
      return 1;
    }
    std::printf("ready\n");
    std::fflush(stdout);
    wait_forever();
  }
  if (mode == "lines" && argc == 3) {
    const int count = std::atoi(argv[2]);
    for (int i = 0; i < count; ++i) {
      std::printf("rank %d line %d\n", rank, i);
      std::fprintf(stderr, "rank %d err %d\n", rank, i);
    }
    return 0;
  }
  if (mode == "partial") {
    std::printf("rank %d no newline", rank);
    return 0;
  }
  if (mode == "attempts" && argc == 4) {
    std::printf("restart=%s\n", std::getenv("TORCHELASTIC_RESTART_COUNT"));
    if (rank != 0) return 0;
    { std::ofstream(argv[2], std::ios::app) << "attempt\n"; }
    std::ifstream in(argv[2]);
    int lines = 0;
    for (std::string line; std::getline(in, line);)
      ++lines;
    return lines <= std::atoi(argv[3]) ? 1 : 0;
  }
  if (mode == "session") {  // whether this rank leads its own session (no terminal's job control)
    std::printf("session leader=%d\n", getsid(0) == getpid() ? 1 : 0);
    return 0;
  }
  if (mode == "flood" && argc == 3) {  // rank argv[2] exits 3 at once; the others write forever
    if (rank == std::atoi(argv[2])) return 3;
    const std::string line(100, 'y');
    while (std::puts(line.c_str()) >= 0) {
    }
    return 0;
  }
  if (mode == "flood-both") {
    const std::string line(100, 'z');
    while (std::puts(line.c_str()) >= 0 && std::fputs((line + "\n").c_str(), stderr) >= 0) {
    }
    return 0;
  }
  if (mode == "flood-until-usr2" && argc == 3) {
    if (rank == std::atoi(argv[2])) {
      sigset_t usr2;
      sigemptyset(&usr2);
      sigaddset(&usr2, SIGUSR2);
      sigprocmask(SIG_BLOCK, &usr2, nullptr);
      std::fprintf(stderr, "waiting for SIGUSR2 rank=%d pid=%d\n", rank,
                   static_cast<int>(getpid()));
      int received = 0;
      sigwait(&usr2, &received);
      return 3;
    }
    const std::string line(100, 'y');
    while (std::puts(line.c_str()) >= 0) {
    }
    return 0;
  }
  if (mode == "affinity") {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) return 92;
    std::string cpus;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &set)) cpus += (cpus.empty() ? "" : ",") + std::to_string(cpu);
    }
    std::printf("cpus=%s\n", cpus.c_str());
    return 0;
  }
  std::fprintf(stderr, "test_worker: bad mode or arguments: %s\n", mode.c_str());
  return 64;
}

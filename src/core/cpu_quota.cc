// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "core/cpu_quota.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace shmccl::detail {
namespace {

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, separator))
    parts.push_back(part);
  return parts;
}

bool read_first_line(const std::string& path, std::string& line) {
  std::ifstream in(path);
  return static_cast<bool>(std::getline(in, line));
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape(const std::string& field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      const std::string digits = field.substr(i + 1, 3);
      if (digits.find_first_not_of("01234567") == std::string::npos) {
        out += static_cast<char>(std::stoi(digits, nullptr, 8));
        i += 3;
        continue;
      }
    }
    out += field[i];
  }
  return out;
}

// One hierarchy that may limit the CPU: where this process sits in it and where it is mounted.
struct Hierarchy {
  bool found = false;
  std::string cgroup_path;  // from /proc/self/cgroup
  std::string mount_root;   // the hierarchy's directory the mount shows (field 4 of mountinfo)
  std::string mount_point;  // where it is mounted
};

// The limit in CPUs one cgroup directory sets, 0 for none.
double limit_at(const std::string& directory, bool v2) {
  std::string line;
  if (v2) {
    if (!read_first_line(directory + "/cpu.max", line)) return 0;
    const std::vector<std::string> fields = split(line, ' ');
    if (fields.size() != 2 || fields[0] == "max") return 0;
    const double quota = std::atof(fields[0].c_str());
    const double period = std::atof(fields[1].c_str());
    return quota > 0 && period > 0 ? quota / period : 0;
  }
  std::string period_line;
  if (!read_first_line(directory + "/cpu.cfs_quota_us", line) ||
      !read_first_line(directory + "/cpu.cfs_period_us", period_line)) {
    return 0;
  }
  const double quota = std::atof(line.c_str());  // -1: no limit
  const double period = std::atof(period_line.c_str());
  return quota > 0 && period > 0 ? quota / period : 0;
}

// The tightest limit from the process's cgroup up to the mount's top directory.
double tightest_limit(const std::string& root, const Hierarchy& hierarchy, bool v2) {
  std::string relative = hierarchy.cgroup_path;
  // Without a cgroup namespace a container's mount shows its own cgroup as the top directory
  // while /proc/self/cgroup names the full path: the part below the mount's root is ours.
  if (hierarchy.mount_root != "/" && relative.rfind(hierarchy.mount_root, 0) == 0) {
    relative = relative.substr(hierarchy.mount_root.size());
  }
  double tightest = 0;
  while (true) {
    const double limit = limit_at(root + hierarchy.mount_point + relative, v2);
    if (limit > 0) tightest = tightest > 0 ? std::min(tightest, limit) : limit;
    if (relative.empty() || relative == "/") break;
    const size_t slash = relative.rfind('/');
    relative = slash == std::string::npos || slash == 0 ? std::string() : relative.substr(0, slash);
  }
  return tightest;
}

}  // namespace

double cpu_quota(const std::string& root) {
  Hierarchy v1;
  Hierarchy v2;
  std::ifstream cgroups(root + "/proc/self/cgroup");
  for (std::string line; std::getline(cgroups, line);) {
    // "<id>:<controllers>:<path>"; the path may itself contain ':'.
    const size_t first = line.find(':');
    const size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (line.compare(0, first, "0") == 0 && controllers.empty()) {
      v2.found = true;
      v2.cgroup_path = path;
    }
    const std::vector<std::string> names = split(controllers, ',');
    if (std::find(names.begin(), names.end(), "cpu") != names.end()) {
      v1.found = true;
      v1.cgroup_path = path;
    }
  }
  if (!v1.found && !v2.found) return 0;
  std::ifstream mounts(root + "/proc/self/mountinfo");
  bool v1_mounted = false;
  bool v2_mounted = false;
  for (std::string line; std::getline(mounts, line);) {
    // "<id> <parent> <major:minor> <root> <mount point> <options> [optional...] - <type> <source>
    // <super options>"
    const std::vector<std::string> fields = split(line, ' ');
    const auto dash = std::find(fields.begin(), fields.end(), "-");
    if (fields.size() < 5 || dash == fields.end() || dash + 3 > fields.end()) continue;
    const std::string& type = *(dash + 1);
    const std::vector<std::string> options = split(*(dash + 3), ',');
    if (type == "cgroup2" && v2.found && !v2_mounted) {
      v2_mounted = true;
      v2.mount_root = unescape(fields[3]);
      v2.mount_point = unescape(fields[4]);
    } else if (type == "cgroup" && v1.found && !v1_mounted &&
               std::find(options.begin(), options.end(), "cpu") != options.end()) {
      v1_mounted = true;
      v1.mount_root = unescape(fields[3]);
      v1.mount_point = unescape(fields[4]);
    }
  }
  // The cpu controller is in one hierarchy only: v1's when it has it.
  if (v1.found && v1_mounted) return tightest_limit(root, v1, /*v2=*/false);
  if (v2.found && v2_mounted) return tightest_limit(root, v2, /*v2=*/true);
  return 0;
}

int cpu_quota_cores() {
  static const int cores = [] {
    const double quota = cpu_quota();
    if (quota <= 0) return 0;
    // Whole CPUs: 1.5 CPUs keep one rank busy, not two (a second spinning rank would exhaust the
    // quota early and stall both).
    return std::max(1, static_cast<int>(std::floor(quota)));
  }();
  return cores;
}

}  // namespace shmccl::detail

// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// DirectoryStore: a store of files in a directory (c10d's FileStore idea), for the tests of
// InitOptions::store: a store the library did not make, as a program would plug in. Each key is a
// file named by the key's hex digits; set() writes a temporary file and renames it over the key's
// (readers see the old value or the new one, whole); add() holds an flock on a lock file. Waits
// poll every millisecond until their deadline, as c10d's FileStore polls.
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/file_descriptor.h"
#include "shmccl/error.hpp"
#include "shmccl/store.hpp"

namespace shmccl::testing {

class DirectoryStore final : public Store {
 public:
  explicit DirectoryStore(std::string directory,
                          std::chrono::milliseconds timeout = std::chrono::seconds(30))
      : Store(timeout), directory_(std::move(directory)) {}

  using Store::set;
  using Store::wait;

  void set(const std::string& key, const std::string& value) override {
    ++calls_;
    write_whole(path_of(key), value);
  }
  std::string get(const std::string& key) override {
    ++calls_;
    wait({key}, timeout());
    return read_whole(path_of(key));
  }
  int64_t add(const std::string& key, int64_t delta) override {
    ++calls_;
    // Closing the descriptor releases the flock.
    const FileDescriptor lock(
        ::open((directory_ + "/.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (!lock.valid() || ::flock(lock.get(), LOCK_EX) != 0) {
      throw Error("DirectoryStore: cannot lock " + directory_);
    }
    const std::string path = path_of(key);
    const int64_t value =
        (std::filesystem::exists(path) ? std::stoll(read_whole(path)) : 0) + delta;
    write_whole(path, std::to_string(value));
    return value;
  }
  bool check(const std::vector<std::string>& keys) override {
    ++calls_;
    for (const std::string& key : keys) {
      if (!std::filesystem::exists(path_of(key))) return false;
    }
    return true;
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    ++calls_;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!check(keys)) {
      if (std::chrono::steady_clock::now() >= deadline) {
        std::string names;
        for (const std::string& key : keys)
          names += " " + key;
        throw TimeoutError("DirectoryStore: timed out waiting for keys" + names);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // a polling store's pause
    }
  }
  bool delete_key(const std::string& key) override {
    ++calls_;
    return std::filesystem::remove(path_of(key));
  }
  int64_t num_keys() override {
    int64_t count = 0;
    for (const auto& entry : std::filesystem::directory_iterator(directory_)) {
      if (entry.path().filename().string()[0] != '.') ++count;
    }
    return count;
  }

  // How many calls this process made on the store.
  int calls() const { return calls_.load(); }
  // The value of `key` as stored in `directory` (for the test process, which holds no store).
  static std::string read_key(const std::string& directory, const std::string& key) {
    return read_whole(directory + "/" + hex(key));
  }

 private:
  static std::string hex(const std::string& key) {
    static const char digits[] = "0123456789abcdef";
    std::string name;
    for (unsigned char c : key) {
      name += digits[c >> 4];
      name += digits[c & 15];
    }
    return name;
  }
  std::string path_of(const std::string& key) const { return directory_ + "/" + hex(key); }
  static std::string read_whole(const std::string& path) {
    std::ifstream file(path, std::ios::binary);
    if (!file) throw Error("DirectoryStore: cannot read " + path);
    return std::string(std::istreambuf_iterator<char>(file), {});
  }
  void write_whole(const std::string& path, const std::string& value) const {
    static std::atomic<int> counter{0};
    const std::string temporary = directory_ + "/.tmp." + std::to_string(::getpid()) + "." +
                                  std::to_string(counter.fetch_add(1));
    {
      std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
      file << value;
      if (!file.flush()) throw Error("DirectoryStore: cannot write " + temporary);
    }
    std::filesystem::rename(temporary, path);
  }

  std::string directory_;
  std::atomic<int> calls_{0};
};

// A fresh directory for one job's store, removed with everything in it.
class StoreDirectory {
 public:
  StoreDirectory() {
    char pattern[] = "/tmp/shmccl-store-XXXXXX";
    const char* made = ::mkdtemp(pattern);
    if (made == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = made;
  }
  ~StoreDirectory() { std::filesystem::remove_all(path_); }
  StoreDirectory(const StoreDirectory&) = delete;
  StoreDirectory& operator=(const StoreDirectory&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace shmccl::testing

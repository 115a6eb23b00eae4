// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "core/error_file.h"

#include <cxxabi.h>
#include <execinfo.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <mutex>
#include <string_view>
#include <typeinfo>

#include "core/json.h"
#include "shmccl/elastic.hpp"

namespace shmccl::elastic {
namespace detail {
namespace {

std::string demangle(const char* name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> readable(
      abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && readable ? readable.get() : name;
}

// write(2) all of `data`; false on any error.
bool write_fully(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t written = ::write(fd, data.data(), data.size());
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return false;
    data.remove_prefix(static_cast<size_t>(written));
  }
  return true;
}

// Writes under a temporary name, then renames: the launcher never reads half a file.
bool write_error_file(const std::string& contents) {
  const char* path = std::getenv(kErrorFileVariable);
  if (path == nullptr || *path == '\0') return false;
  // One name per writer: two threads of a process that fail at once must not write one file.
  static std::atomic<uint64_t> writers{0};
  const std::string temporary = std::string(path) + ".tmp." + std::to_string(getpid()) + "." +
                                std::to_string(writers.fetch_add(1, std::memory_order_relaxed));
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const bool written = write_fully(fd, contents);
  ::close(fd);
  if (!written || std::rename(temporary.c_str(), path) != 0) {
    ::unlink(temporary.c_str());
    return false;
  }
  return true;
}

std::terminate_handler g_previous_handler = nullptr;

// The frames of the throw site: when no handler catches an exception, the C++ runtime calls
// std::terminate from the throw itself, before unwinding anything.
std::string throw_site_frames() {
  void* frames[64];
  const int count = backtrace(frames, 64);
  std::unique_ptr<char*, void (*)(void*)> symbols(backtrace_symbols(frames, count), std::free);
  if (!symbols) return {};
  std::string out = "thrown at (innermost first; `addr2line -f -C -e FILE +OFFSET` names a frame):";
  for (int i = 1; i < count; ++i) {  // frame 0 is this function
    out += "\n  #" + std::to_string(i) + " " + symbols.get()[i];
  }
  return out;
}

[[noreturn]] void record_and_terminate() {
  if (std::exception_ptr error = std::current_exception()) {
    const std::string message = describe(error);
    write_error_file(error_file_contents(message, message + "\n" + throw_site_frames(),
                                         static_cast<long>(std::time(nullptr))));
  }
  g_previous_handler();
  std::abort();  // the default handler does not return; a precaution
}

}  // namespace

std::string describe(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& exception) {
    return demangle(typeid(exception).name()) + ": " + exception.what();
  } catch (...) {
    const std::type_info* type = abi::__cxa_current_exception_type();
    return type != nullptr ? demangle(type->name()) + " (not a std::exception)"
                           : std::string("an unknown exception");
  }
}

std::string error_file_contents(const std::string& message, const std::string& callstack,
                                long timestamp) {
  return "{\"message\": {\"message\": " + json::quote(message) +
         ", \"extraInfo\": {\"py_callstack\": " +
         json::quote(callstack.empty() ? message : callstack) + ", \"timestamp\": \"" +
         std::to_string(timestamp) + "\"}}}\n";
}

void install_terminate_recorder() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (std::getenv(kErrorFileVariable) == nullptr) return;
    const std::terminate_handler current = std::get_terminate();
    if (current != &__gnu_cxx::__verbose_terminate_handler) return;  // the program's own wins
    g_previous_handler = current;
    std::set_terminate(&record_and_terminate);
  });
}

}  // namespace detail

bool record_exception(std::exception_ptr error) noexcept {
  if (!error) return false;
  try {
    const std::string message = detail::describe(error);
    return detail::write_error_file(
        detail::error_file_contents(message, {}, static_cast<long>(std::time(nullptr))));
  } catch (...) {  // out of memory: nothing more to do
    return false;
  }
}

}  // namespace shmccl::elastic

// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// torch.distributed.elastic's error file. A launcher (shmrun, torchrun) gives each rank a path in
// TORCHELASTIC_ERROR_FILE; a rank that fails writes why there, in torch's JSON layout, and the
// launcher's failure report shows it. init_process_group() arranges this on its own for an
// exception that escapes main (it installs a std::terminate handler that records the exception
// and where it was thrown, unless the program installed a handler of its own). record() is
// torch's @record, for code that catches an exception and then exits.
#pragma once

#include <exception>
#include <utility>

// The library's interface: exported from libshmccl.so, which hides everything else.
#pragma GCC visibility push(default)

namespace shmccl::elastic {

// Writes `error` ("shmccl::RemoteError: <what()>") to the file TORCHELASTIC_ERROR_FILE names.
// False when the variable is unset, `error` is null or the file cannot be written. Never throws.
bool record_exception(std::exception_ptr error) noexcept;

// Runs `body` and returns what it returns; an exception that escapes it is recorded, then
// rethrown:  int main() { return shmccl::elastic::record([] { ...; return 0; }); }
template <typename Body>
decltype(auto) record(Body&& body) {
  try {
    return std::forward<Body>(body)();
  } catch (...) {
    record_exception(std::current_exception());
    throw;
  }
}

}  // namespace shmccl::elastic

#pragma GCC visibility pop

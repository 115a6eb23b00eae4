// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The writing side of torch.distributed.elastic's error file (shmccl/elastic.hpp), and the
// std::terminate handler that records an exception escaping main.
#pragma once

#include <exception>
#include <string>

namespace shmccl::elastic::detail {

inline constexpr const char* kErrorFileVariable = "TORCHELASTIC_ERROR_FILE";

// "shmccl::RemoteError: <what()>", as torch writes "RuntimeError: <str(e)>".
std::string describe(std::exception_ptr error);

// The file's contents: {"message": {"message": ..., "extraInfo": {"py_callstack": ...,
// "timestamp": "<seconds>"}}}. `callstack` empty: the message stands in for it.
std::string error_file_contents(const std::string& message, const std::string& callstack,
                                long timestamp);

// Once per process, when TORCHELASTIC_ERROR_FILE is set and std::terminate has libstdc++'s
// default handler: a handler that records the uncaught exception, with the frames of its throw
// site, before the default handler runs.
void install_terminate_recorder();

}  // namespace shmccl::elastic::detail

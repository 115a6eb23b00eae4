// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The ranks' error files (torch.distributed.elastic's TORCHELASTIC_ERROR_FILE): each rank is
// given a path, and a rank that fails writes why there (shmccl does it for an exception that
// escapes main, torch's @record for Python). shmrun reads it when the rank ends and shows it in
// its failure report. The files live in the log directory, or else among the attempt's shared
// memory objects, removed with them (LaunchPlan::error_file).
#pragma once

#include <optional>
#include <string>

namespace shmccl::launcher {

// What a rank recorded.
struct RecordedError {
  std::string message;    // "shmccl::RemoteError: ..." (torch: "RuntimeError: ...")
  std::string traceback;  // torch's py_callstack; shmccl's message and throw site
  std::optional<long> timestamp;
};

// The file at `path`, read as torch.distributed.elastic reads it ({"message": "..."} or
// {"message": {"message": ..., "extraInfo": {"py_callstack": ..., "timestamp": ...}}}); nullopt
// when there is none. A file in another layout is shown as it is, cut at 4 KiB.
std::optional<RecordedError> read_error_file(const std::string& path);

}  // namespace shmccl::launcher

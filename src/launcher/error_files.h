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

// shmrun's own error file, when whoever started it gave it a TORCHELASTIC_ERROR_FILE (a
// scheduler, an outer elastic agent): the root cause's recorded error, as torch's @record around
// torchrun's main copies it up, with `error_code` (the failed rank's exit code) added as torch
// adds it; or, when that rank recorded nothing, `message`. torch's layout:
// {"message": {"message": ..., "extraInfo": {"py_callstack": ..., "timestamp": "..."},
// "errorCode": N}}. False (and errno) when it cannot be written.
bool write_launcher_error_file(const std::string& path,
                               const std::optional<RecordedError>& recorded, int error_code,
                               const std::string& message);

}  // namespace shmccl::launcher

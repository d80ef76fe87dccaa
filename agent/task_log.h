// A task's log files in its directory: task.log (the task's stdout and
// stderr), task.log.1 … task.log.N (older, by copytruncate rotation) and
// log_offset (bytes rotated away so far). Offsets handed to readers count
// bytes of the whole log, so they stay valid across rotations and agent
// restarts.
//
// Thread-safety: these functions touch only files. Rotate and Read of the same
// directory must not run concurrently (the agent serialises them).
#ifndef PARALLAX_AGENT_TASK_LOG_H_
#define PARALLAX_AGENT_TASK_LOG_H_

#include <cstdint>
#include <string>

#include "parallax/status.h"
#include "schemas/agent_types.h"

namespace parallax::agent {

inline constexpr char kTaskLogName[] = "task.log";
inline constexpr int32_t kMaxReadBytes = 1 << 20;

// "<dir>/task.log".
std::string TaskLogPath(const std::string& dir);

// Bytes rotated away from the task's log so far (0 when never rotated).
int64_t RotatedBytes(const std::string& dir);

// When task.log is larger than `max_bytes`: shifts task.log.K to task.log.K+1
// (dropping task.log.`keep`), copies task.log to task.log.1, truncates
// task.log, and adds the copied size to the rotated bytes. Returns whether it
// rotated. Bytes the task writes between the copy and the truncation are lost
// (the price of copytruncate; the task's descriptor stays valid).
StatusOr<bool> RotateIfNeeded(const std::string& dir, int64_t max_bytes, int keep = 3);

// Up to `max_bytes` (capped at kMaxReadBytes) of the log from absolute
// `offset`; offset -1 reads the last max_bytes. An offset before the kept log
// starts reads from its start (first_offset); one past the end reads nothing.
// `complete` is `ended` and next_offset at the end of the log.
// INVALID_ARGUMENT for max_bytes <= 0 or offset < -1.
StatusOr<rpc::LogChunk> ReadTaskLog(const std::string& dir, int64_t offset, int32_t max_bytes,
                                    bool ended);

// The last `max_lines` lines of the log, at most `max_bytes` (cut at a line
// start where possible); "" when there is none.
std::string TaskLogTail(const std::string& dir, int max_lines = 20, int max_bytes = 2048);

}  // namespace parallax::agent

#endif  // PARALLAX_AGENT_TASK_LOG_H_

// The agent's own small service: reading task logs. Served by every
// parallax-agent on the address it registered with the coordinator.
// Same compatibility rules as coordinator.thrift (RequestHeader first,
// protocol version checked, auth token checked when the agent has one).

include "coordinator.thrift"

namespace cpp parallax.rpc

struct LogChunk {
  1: required binary data
  // Offset to ask for next. Offsets count bytes of the task's whole log,
  // across rotations; bytes rotated away are skipped (first_offset says
  // where the kept log starts).
  2: required i64 next_offset
  3: required i64 first_offset
  // True when the task has ended and next_offset is the end of its log.
  4: required bool complete
}

service Agent {
  coordinator.HelloResponse Hello(1: coordinator.RequestHeader header)
      throws (1: coordinator.CoordinatorError error)
  // Up to max_bytes of the task's log from offset. offset -1: the last
  // max_bytes of the log.
  LogChunk ReadLog(1: coordinator.RequestHeader header, 2: coordinator.TaskKey task,
                   3: i64 offset, 4: i32 max_bytes)
      throws (1: coordinator.CoordinatorError error)
}

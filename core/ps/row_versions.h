// Row versions (schemas/ps_wire.md, "Row versions"): the u32 a shard's
// tables (ps/variable_table.h, core/ps/dynamic_table.h) keep per row for the
// row cache's version check, on the same rules for both.
#ifndef PARALLAX_CORE_PS_ROW_VERSIONS_H_
#define PARALLAX_CORE_PS_ROW_VERSIONS_H_

#include <cstdint>
#include <random>

#include "schemas/ps_wire.h"

namespace parallax::ps {

// A row's version after one more update: mod 2^32, skipping
// ps_wire::kRowFresh (which a reply uses to say "not sent").
inline uint32_t NextRowVersion(uint32_t v) { return v + 1 == ps_wire::kRowFresh ? 0 : v + 1; }

// What a checked PULL's reply says of one id (schemas/ps_wire.md, "Row
// versions"): ps_wire::kRowFresh when the worker's copy, at version `held`,
// took at most `bound` updates since (now − held mod 2^32), so no row is
// sent; otherwise the row's version `now`. A copy not held
// (ps_wire::kNotHeld) is never fresh.
inline uint32_t VersionAnswer(uint32_t now, uint32_t held, uint64_t bound) {
  const bool fresh =
      held != ps_wire::kNotHeld && uint64_t{static_cast<uint32_t>(now - held)} <= bound;
  return fresh ? ps_wire::kRowFresh : now;
}

// A version drawn at random (never kRowFresh): where a process's rows
// start, so that a version another process handed out (an earlier
// generation of the shard) is unlikely to be near one of this one's.
inline uint32_t RandomRowVersion() {
  std::random_device rd;
  return rd() % ps_wire::kRowFresh;
}

}  // namespace parallax::ps

#endif  // PARALLAX_CORE_PS_ROW_VERSIONS_H_

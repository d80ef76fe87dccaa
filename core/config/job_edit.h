// Edits of a job file's text that keep the rest of it as written (comments,
// order, line numbers): what `parallax run --timeline DIR` uses to set a key
// for the job it submits, and what `parallax resume --workers M --shards S`
// changes in a stored job.
#ifndef PARALLAX_CORE_CONFIG_JOB_EDIT_H_
#define PARALLAX_CORE_CONFIG_JOB_EDIT_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "parallax/status.h"

namespace parallax {

// Returns `text` with [trainer] `key` set to the string `value`: the key's
// line is replaced, or a line is added after the [trainer] header, or (for a
// [trainer] written with dotted keys or inline, or none) the document is
// re-serialised. INVALID_ARGUMENT naming `source` when `text` is not TOML.
StatusOr<std::string> SetTrainerString(std::string_view text, std::string_view source,
                                       std::string_view key, std::string_view value);

// The same for the integer [`table`] `key` (e.g. [job] workers).
StatusOr<std::string> SetInteger(std::string_view text, std::string_view source,
                                 const std::string& table, std::string_view key, int64_t value);

}  // namespace parallax

#endif  // PARALLAX_CORE_CONFIG_JOB_EDIT_H_

// The control-plane shared secret: read from a file that only its owner can
// read (a secret on a command line is visible to every user in `ps`), or,
// deprecated, from --token / $PARALLAX_TOKEN.
#ifndef PARALLAX_CORE_BASE_SECRET_H_
#define PARALLAX_CORE_BASE_SECRET_H_

#include <string>

#include "parallax/status.h"

namespace parallax {

// The secret in `path`, without its trailing newline(s) ("\n" or "\r\n").
// FAILED_PRECONDITION, naming the file and what to do, when the file cannot
// be read, is readable or writable by its group or others (mode & 077), is
// not a regular file, is empty (after stripping), or is over 4096 bytes.
StatusOr<std::string> ReadSecretFile(const std::string& path);

// Where a daemon's secret comes from, in the order it is looked for: the
// --secret-file flag, the --token flag, $PARALLAX_SECRET_FILE,
// $PARALLAX_TOKEN. Fill in what main() saw; empty means unset.
struct SecretSources {
  std::string secret_file_flag;
  std::string token_flag;
  std::string secret_file_env;
  std::string token_env;
};

// The secret from the first source that is set ("" when none is: no
// authentication). Fails as ReadSecretFile does, and with INVALID_ARGUMENT
// when both --secret-file and --token are given. When `warning` is not null
// and the secret comes from --token, *warning says why --secret-file is
// better (the caller logs it).
StatusOr<std::string> ResolveSecret(const SecretSources& sources, std::string* warning = nullptr);

// Help text for --secret-file and --token, the same in every binary.
extern const char kSecretFileHelp[];
extern const char kTokenHelp[];

}  // namespace parallax

#endif  // PARALLAX_CORE_BASE_SECRET_H_

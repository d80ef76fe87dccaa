#include "core/base/secret.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace parallax {

const char kSecretFileHelp[] =
    "file holding the control-plane shared secret (default: $PARALLAX_SECRET_FILE); must not be "
    "readable by group or others (chmod 600); a trailing newline is ignored";
const char kTokenHelp[] =
    "DEPRECATED: the shared secret itself (default: $PARALLAX_TOKEN); a secret on the command "
    "line is visible to every user in `ps`, use --secret-file";

namespace {

constexpr size_t kMaxSecretBytes = 4096;

Status Refuse(const std::string& path, const std::string& what) {
  return FailedPrecondition("secret file '" + path + "' " + what);
}

}  // namespace

StatusOr<std::string> ReadSecretFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    return Refuse(path, std::string("cannot be opened: ") + std::strerror(errno) +
                            "; check the path given to --secret-file or $PARALLAX_SECRET_FILE");
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return Refuse(path, "is not a regular file");
  }
  if ((st.st_mode & 077) != 0) {
    close(fd);
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Refuse(path, std::string("is readable or writable by group or others (mode ") + mode +
                            "); run `chmod 600 " + path + "` so only its owner can read it");
  }
  std::string text;
  char buf[1024];
  while (text.size() <= kMaxSecretBytes) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      return Refuse(path, std::string("cannot be read: ") + std::strerror(err));
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  if (text.size() > kMaxSecretBytes) {
    return Refuse(path, "is larger than " + std::to_string(kMaxSecretBytes) +
                            " bytes; it should hold only the secret");
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  if (text.empty()) {
    return Refuse(path, "is empty; write a secret into it, e.g. `head -c 32 /dev/urandom | "
                        "base64 > " + path + "`");
  }
  return text;
}

StatusOr<std::string> ResolveSecret(const SecretSources& s, std::string* warning) {
  if (!s.secret_file_flag.empty() && !s.token_flag.empty()) {
    return InvalidArgument("give either --secret-file or --token, not both");
  }
  if (!s.secret_file_flag.empty()) return ReadSecretFile(s.secret_file_flag);
  if (!s.token_flag.empty()) {
    if (warning) {
      *warning = "--token is deprecated: the secret is visible to every user of this host in "
                 "`ps`; put it in a file only you can read and pass --secret-file";
    }
    return s.token_flag;
  }
  if (!s.secret_file_env.empty()) return ReadSecretFile(s.secret_file_env);
  return s.token_env;
}

}  // namespace parallax

#include "core/comm/rendezvous_store.h"

#include <gloo/common/error.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/hash_store.h>

#include <algorithm>
#include <filesystem>
#include <utility>

namespace parallax::comm {
namespace {

std::string JoinKeys(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size() && i < 8; ++i) out += (i ? ", \"" : "\"") + keys[i] + "\"";
  if (keys.size() > 8) out += ", ...";
  return out;
}

// Puts a Gloo store (HashStore, FileStore) behind RendezvousStore. Gloo's
// stores throw on timeout; this turns that into DEADLINE_EXCEEDED.
class GlooBackedStore : public RendezvousStore {
 public:
  GlooBackedStore(std::unique_ptr<gloo::rendezvous::Store> store, std::string what)
      : store_(std::move(store)), what_(std::move(what)) {}

  Status Set(const std::string& key, const std::string& value) override {
    try {
      store_->set(key, std::vector<char>(value.begin(), value.end()));
      return Status::Ok();
    } catch (const std::exception& e) {
      return IoError(what_ + ": cannot set key \"" + key + "\": " + e.what());
    }
  }

  StatusOr<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                         Deadline deadline) override {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    try {
      // Gloo treats a zero timeout as "forever"; wait at least 1 ms.
      store_->wait(keys, std::max(left, std::chrono::milliseconds(1)));
      std::vector<std::string> out;
      out.reserve(keys.size());
      for (const auto& key : keys) {
        std::vector<char> v = store_->get(key);
        out.emplace_back(v.begin(), v.end());
      }
      return out;
    } catch (const gloo::IoException& e) {
      return DeadlineExceeded(what_ + ": key(s) " + JoinKeys(keys) + " still missing after " +
                              std::to_string(std::max<int64_t>(0, left.count())) +
                              " ms: " + e.what());
    } catch (const std::exception& e) {
      return IoError(what_ + ": cannot get key(s) " + JoinKeys(keys) + ": " + e.what());
    }
  }

 private:
  std::unique_ptr<gloo::rendezvous::Store> store_;
  const std::string what_;
};

}  // namespace

std::unique_ptr<RendezvousStore> NewInMemoryRendezvousStore() {
  return std::make_unique<GlooBackedStore>(std::make_unique<gloo::rendezvous::HashStore>(),
                                           "in-memory rendezvous store");
}

StatusOr<std::unique_ptr<RendezvousStore>> NewFileRendezvousStore(const std::string& directory) {
  std::error_code ec;
  if (!std::filesystem::is_directory(directory, ec)) {
    return InvalidArgument("file rendezvous store: \"" + directory +
                           "\" is not a directory; create it first");
  }
  try {
    return std::unique_ptr<RendezvousStore>(
        std::make_unique<GlooBackedStore>(std::make_unique<gloo::rendezvous::FileStore>(directory),
                                          "file rendezvous store \"" + directory + "\""));
  } catch (const std::exception& e) {
    return IoError("file rendezvous store \"" + directory + "\": " + e.what());
  }
}

}  // namespace parallax::comm

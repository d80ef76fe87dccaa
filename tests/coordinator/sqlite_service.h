// A CoordinatorService over a real SQLite file in a temporary directory, on
// a FakeClock, not served: for tests that call the service and the store
// directly (the web site, the web endpoint, call statistics).
#ifndef PARALLAX_TESTS_COORDINATOR_SQLITE_SERVICE_H_
#define PARALLAX_TESTS_COORDINATOR_SQLITE_SERVICE_H_

#include <memory>

#include "coordinator/service/service.h"
#include "coordinator/store/sqlite_state_store.h"
#include "schemas/coordinator_constants.h"
#include "tests/testing/temp_dir.h"

namespace parallax::coordinator::testing {

struct SqliteService {
  // Opens <dir>/state.db and the service (Init), or says why not.
  Status Open(ServiceOptions options = {}) {
    SqliteStateStoreOptions store_options;
    store_options.path = dir.File("state.db");
    PX_ASSIGN_OR_RETURN(store, OpenSqliteStateStore(store_options));
    service = std::make_shared<CoordinatorService>(store.get(), &clock, options);
    return service->Init();
  }
  // A request header of this build's protocol, without a token.
  static rpc::RequestHeader Header() {
    rpc::RequestHeader h;
    h.protocol_version = rpc::g_coordinator_constants.PROTOCOL_VERSION;
    return h;
  }

  parallax::testing::TempDir dir;
  FakeClock clock;
  std::unique_ptr<StateStore> store;
  std::shared_ptr<CoordinatorService> service;
};

}  // namespace parallax::coordinator::testing

#endif  // PARALLAX_TESTS_COORDINATOR_SQLITE_SERVICE_H_

#include "coordinator/server.h"

#include "coordinator/service.h"

namespace parallax::coordinator {

StatusOr<std::unique_ptr<Server>> StartServer(const ServerOptions& options,
                                              std::shared_ptr<CoordinatorService> service) {
  ServerOptions named = options;
  if (named.what == "service") named.what = "coordinator";
  named.auth_token = service->auth_token();
  return StartThriftServer(named, std::make_shared<rpc::CoordinatorProcessor>(std::move(service)));
}

}  // namespace parallax::coordinator

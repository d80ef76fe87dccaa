#include "coordinator/service/server.h"

#include "coordinator/service/rpc_stats.h"
#include "coordinator/service/service.h"

namespace parallax::coordinator {

StatusOr<std::unique_ptr<Server>> StartServer(const ServerOptions& options,
                                              std::shared_ptr<CoordinatorService> service,
                                              RpcStats* rpc_stats) {
  ServerOptions named = options;
  if (named.what == "service") named.what = "coordinator";
  named.auth_token = service->auth_token();
  auto processor = std::make_shared<rpc::CoordinatorProcessor>(std::move(service));
  if (rpc_stats != nullptr) processor->setEventHandler(NewRpcStatsHandler(rpc_stats));
  return StartThriftServer(named, std::move(processor));
}

}  // namespace parallax::coordinator

// How a CoordinatorError from any Parallax Thrift service becomes a Status
// (see core/rpc/coordinator_client.h for the mapping).
#ifndef PARALLAX_CORE_RPC_ERROR_MAPPING_H_
#define PARALLAX_CORE_RPC_ERROR_MAPPING_H_

#include "parallax/status.h"
#include "schemas/coordinator_types.h"

namespace parallax {

Status FromCoordinatorError(const rpc::CoordinatorError& e);

}  // namespace parallax

#endif  // PARALLAX_CORE_RPC_ERROR_MAPPING_H_

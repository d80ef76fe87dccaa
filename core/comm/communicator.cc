#include "core/comm/communicator.h"

#include <cstring>
#include <vector>

#include "core/comm/backends.h"
#include "core/comm/rendezvous_store.h"
#include "schemas/kv_keys.h"

namespace parallax::comm {

size_t DataTypeSize(DataType type) {
  switch (type) {
    case DataType::kFloat32:
    case DataType::kInt32:
      return 4;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kUInt8:
      return 1;
  }
  return 0;
}

std::string_view DataTypeName(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kInt32:
      return "int32";
    case DataType::kUInt8:
      return "uint8";
  }
  return "?";
}

std::string_view ReduceOpName(ReduceOp op) { return op == ReduceOp::kSum ? "sum" : "mean"; }

std::string_view BackendName(Backend backend) {
  return backend == Backend::kGloo ? "gloo" : "nccl";
}

Status Communicator::AllReducePieces(std::span<const Piece> pieces, DataType type, ReduceOp op,
                                     Deadline deadline) {
  if (pieces.size() == 1) return AllReduce(pieces[0].data, pieces[0].count, type, op, deadline);
  const size_t esize = DataTypeSize(type);
  size_t total = 0;
  for (const Piece& p : pieces) total += p.count;
  std::vector<char> packed(total * esize);
  internal::PackPieces(pieces, esize, packed.data());
  PX_RETURN_IF_ERROR(AllReduce(packed.data(), total, type, op, deadline));
  internal::UnpackPieces(packed.data(), esize, pieces);
  return Status::Ok();
}

namespace internal {
void PackPieces(std::span<const Piece> pieces, size_t esize, char* packed) {
  for (const Piece& p : pieces) {
    if (p.count > 0) std::memcpy(packed, p.data, p.count * esize);
    packed += p.count * esize;
  }
}

void UnpackPieces(const char* packed, size_t esize, std::span<const Piece> pieces) {
  for (const Piece& p : pieces) {
    if (p.count > 0) std::memcpy(p.data, packed, p.count * esize);
    packed += p.count * esize;
  }
}

std::string RankName(const CommunicatorOptions& options) {
  return "rank " + std::to_string(options.rank) + " of " + std::to_string(options.world_size) +
         " (" + std::string(BackendName(options.backend)) + ")";
}
}  // namespace internal

StatusOr<std::unique_ptr<Communicator>> Communicator::Create(const CommunicatorOptions& options,
                                                             RendezvousStore* store) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return InvalidArgument("communicator: rank " + std::to_string(options.rank) +
                           " is outside a world of " + std::to_string(options.world_size) +
                           " rank(s); need 0 <= rank < world_size");
  }
  if (store == nullptr) return InvalidArgument("communicator: no rendezvous store given");
  if (options.key_prefix.empty()) return InvalidArgument("communicator: key_prefix is empty");
  switch (options.backend) {
    case Backend::kGloo:
      if (options.shared_memory && options.world_size > 1) {
        return internal::CreateHostAwareCommunicator(options, store);
      }
      return internal::CreateGlooCommunicator(options, store);
    case Backend::kNccl:
      return internal::CreateNcclCommunicator(options, store);
  }
  return InvalidArgument("communicator: unknown backend");
}

}  // namespace parallax::comm
